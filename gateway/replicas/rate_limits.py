"""How often one client (an address, a visitor) may do one thing, for the deployment
as a whole.

Each key may act `per_minute` times in any minute (a moving window, by `limits`). With
Redis configured the counts live there, so every replica spends from one allowance;
else in this process. A limit that cannot be read (Redis down) lets the request
through: a rate limit guards against abuse, it must not take the gateway down with it.
"""

from __future__ import annotations

import time

import structlog
from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter

from gateway.errors import RateLimited

log = structlog.get_logger(__name__)

KEY_PREFIX = "parley-limits"


class RateLimits:
    """Where the counts live; made once per process and closed with it."""

    def __init__(self, redis_url: str | None = None) -> None:
        self._storage: Storage = (
            MemoryStorage()
            if redis_url is None
            else RedisStorage(f"async+{redis_url}", implementation="redispy", key_prefix=KEY_PREFIX)
        )
        self._limiter = MovingWindowRateLimiter(self._storage)

    def per_minute(self, per_minute: int, what: str) -> RateLimit:
        """A limit of `per_minute` `what` (its name, in the refusal) per key."""
        return RateLimit(self._limiter, per_minute, what)

    async def aclose(self) -> None:
        # limits keeps its Redis client to itself, and offers no way to close it.
        client = getattr(getattr(self._storage, "bridge", None), "storage", None)
        if client is not None:
            await client.aclose()


class RateLimit:
    def __init__(self, limiter: MovingWindowRateLimiter, per_minute: int, what: str) -> None:
        self._limiter = limiter
        self._item = RateLimitItemPerMinute(per_minute)
        self._what = what

    async def take(self, key: str) -> None:
        """Spend one of `key`'s allowance; `RateLimited` if none is left."""
        try:
            if await self._limiter.hit(self._item, self._what, key):
                return
            stats = await self._limiter.get_window_stats(self._item, self._what, key)
        except Exception as exc:
            log.warning(
                "a rate limit could not be read; letting the request through", error=str(exc)
            )
            return
        raise RateLimited(
            f"too many {self._what}; try again in a moment",
            retry_after=max(stats.reset_time - time.time(), 1.0),
        )
