"""Token buckets: how often one client (an address, a visitor) may do one thing.

Each key may act `per_minute` times a minute, in bursts of up to `per_minute`. The
buckets live in this process: with several replicas each holds its own, so a client
spread over N replicas gets up to N times the rate. Buckets that have refilled are
forgotten, so memory follows the clients active in the last minute, not all ever seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.errors import RateLimited

# Past this many keys, full buckets are dropped before a new one is made.
PRUNE_AT = 10_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


class RateLimit:
    def __init__(
        self,
        per_minute: int,
        what: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._capacity = float(per_minute)
        self._per_second = per_minute / 60.0
        self._what = what
        self._monotonic = monotonic
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key: str) -> None:
        """Spend one token of `key`'s bucket; `RateLimited` if it is empty."""
        now = self._monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= PRUNE_AT:
                self._prune(now)
            bucket = self._buckets[key] = _Bucket(self._capacity, now)
        else:
            bucket.tokens = self._refilled(bucket, now)
            bucket.stamp = now
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / self._per_second
            raise RateLimited(f"too many {self._what}; try again in a moment", retry_after=wait)
        bucket.tokens -= 1.0

    def _refilled(self, bucket: _Bucket, now: float) -> float:
        return min(self._capacity, bucket.tokens + (now - bucket.stamp) * self._per_second)

    def _prune(self, now: float) -> None:
        self._buckets = {
            key: bucket
            for key, bucket in self._buckets.items()
            if self._refilled(bucket, now) < self._capacity
        }


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
