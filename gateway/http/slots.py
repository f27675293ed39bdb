"""At most so many of something held at once per key (a visitor's open sockets), in
this process: a socket is held by the replica it is open on."""

from __future__ import annotations

from gateway.errors import RateLimited


class Slots:
    """At most `limit` of something held at once per key (open sockets of a visitor)."""

    def __init__(self, limit: int, what: str, *, retry_after: float) -> None:
        self._limit = limit
        self._what = what
        self._retry_after = retry_after
        self._held: dict[str, int] = {}

    def acquire(self, key: str) -> None:
        held = self._held.get(key, 0)
        if held >= self._limit:
            raise RateLimited(
                f"too many {self._what} at once (at most {self._limit}); close one first",
                retry_after=self._retry_after,
            )
        self._held[key] = held + 1

    def release(self, key: str) -> None:
        held = self._held.get(key, 0) - 1
        if held > 0:
            self._held[key] = held
        else:
            self._held.pop(key, None)
