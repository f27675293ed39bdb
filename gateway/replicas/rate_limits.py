"""How often one client (an address, a visitor) may do one thing, for the deployment
as a whole.

Each key may act `per_minute` times in any minute (a moving window). With Redis
configured the counts live there, by `limits`, so every replica spends from one
allowance; else in this process (`LocalWindows`). A limit that cannot be read (Redis
down) lets the request through: a rate limit guards against abuse, it must not take the
gateway down with it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import structlog
from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

from gateway.errors import RateLimited

log = structlog.get_logger(__name__)

KEY_PREFIX = "parley-limits"
WINDOW_SECONDS = 60.0


class Windows(Protocol):
    async def hit(self, what: str, key: str, per_minute: int) -> float | None:
        """Spend one of `key`'s `what`; None if allowed, else the seconds until one
        is free again."""
        ...


class RateLimits:
    """Where the counts live; made once per process and closed with it."""

    def __init__(self, redis_url: str | None = None) -> None:
        self._redis = (
            None
            if redis_url is None
            else RedisStorage(f"async+{redis_url}", implementation="redispy", key_prefix=KEY_PREFIX)
        )
        self._windows: Windows = (
            LocalWindows() if self._redis is None else SharedWindows(self._redis)
        )

    def per_minute(self, per_minute: int, what: str) -> RateLimit:
        """A limit of `per_minute` `what` (its name, in the refusal) per key."""
        return RateLimit(self._windows, per_minute, what)

    async def aclose(self) -> None:
        # limits keeps its Redis client to itself, and offers no way to close it.
        client = getattr(getattr(self._redis, "bridge", None), "storage", None)
        if client is not None:
            await client.aclose()


class RateLimit:
    def __init__(self, windows: Windows, per_minute: int, what: str) -> None:
        self._windows = windows
        self._per_minute = per_minute
        self._what = what

    async def take(self, key: str) -> None:
        """Spend one of `key`'s allowance; `RateLimited` if none is left."""
        try:
            wait = await self._windows.hit(self._what, key, self._per_minute)
        except Exception as exc:
            log.warning(
                "a rate limit could not be read; letting the request through", error=str(exc)
            )
            return
        if wait is not None:
            raise RateLimited(
                f"too many {self._what}; try again in a moment", retry_after=max(wait, 1.0)
            )


class SharedWindows:
    """The windows in Redis, shared by every replica."""

    def __init__(self, storage: RedisStorage) -> None:
        self._limiter = MovingWindowRateLimiter(storage)
        self._items: dict[int, RateLimitItemPerMinute] = {}

    async def hit(self, what: str, key: str, per_minute: int) -> float | None:
        item = self._items.setdefault(per_minute, RateLimitItemPerMinute(per_minute))
        if await self._limiter.hit(item, what, key):
            return None
        stats = await self._limiter.get_window_stats(item, what, key)
        return stats.reset_time - time.time()


class LocalWindows:
    """The windows in this process: each key's hits of the last minute, oldest first.

    Not limits' own in-memory storage: after every hit it sweeps every key, each in a
    trip to a worker thread, so with a hundred visitors active in a minute a message
    cost 2 ms of CPU (and the sweep ran without pause). Here a hit looks at its own key,
    and keys gone quiet are dropped once a minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._hits: dict[tuple[str, str], deque[float]] = {}
        self._swept = clock()

    def __len__(self) -> int:
        return len(self._hits)

    async def hit(self, what: str, key: str, per_minute: int) -> float | None:
        if per_minute < 1:
            return WINDOW_SECONDS
        now = self._clock()
        if now - self._swept >= WINDOW_SECONDS:
            self._sweep(now)
        hits = self._hits.setdefault((what, key), deque())
        while hits and hits[0] <= now - WINDOW_SECONDS:
            hits.popleft()
        if len(hits) >= per_minute:
            return hits[-per_minute] + WINDOW_SECONDS - now
        hits.append(now)
        return None

    def _sweep(self, now: float) -> None:
        self._swept = now
        quiet = [
            key for key, hits in self._hits.items() if not hits or hits[-1] <= now - WINDOW_SECONDS
        ]
        for key in quiet:
            del self._hits[key]
