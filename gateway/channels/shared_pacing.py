"""The send schedule in Redis, shared by every replica (DESIGN §7: platform limits hold
across replicas).

Each key's next free moment is a Redis key; one script reads and advances all of a
send's keys atomically, on Redis' clock, so replicas with skewed clocks agree. While
Redis is unreachable the replica paces on its own (`Pacer`): a send is never held up
by the bookkeeping of its limits, and the platform's own 429s still slow it down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.channels.pacing import Pacer
from gateway.channels.port import Pace

log = structlog.get_logger(__name__)

PREFIX = "parley:pace:"
REDIS_DOWN = (RedisError, OSError, asyncio.TimeoutError)

# KEYS: the paces' keys. ARGV: "reserve" or "hold", then milliseconds per key (the
# interval to reserve, or how long to hold). Returns how many ms to wait for the slot.
_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local start = now
for i = 1, #KEYS do
  local at = tonumber(redis.call('GET', KEYS[i]) or '0')
  if ARGV[1] == 'reserve' and at > start then start = at end
end
for i = 1, #KEYS do
  local at = tonumber(redis.call('GET', KEYS[i]) or '0')
  local nxt = start + tonumber(ARGV[i + 1])
  if nxt > at then
    redis.call('SET', KEYS[i], nxt, 'PX', nxt - now + 1000)
  end
end
return start - now
"""


class RedisPacer:
    def __init__(self, redis_url: str) -> None:
        self._redis = Redis.from_url(redis_url, socket_connect_timeout=1, socket_timeout=1)
        self._script = self._redis.register_script(_SCRIPT)
        self._local = Pacer()
        self._down = False

    async def wait(self, paces: Sequence[Pace]) -> None:
        if not paces:
            return
        waited = await self._run("reserve", paces, [p.interval for p in paces])
        if waited is None:
            await self._local.wait(paces)
        elif waited > 0:
            await asyncio.sleep(waited)

    async def hold(self, paces: Sequence[Pace], seconds: float) -> None:
        await self._local.hold(paces, seconds)  # also here: Redis may be gone meanwhile
        await self._run("hold", paces, [seconds] * len(paces))

    async def aclose(self) -> None:
        await self._redis.aclose()

    async def _run(self, mode: str, paces: Sequence[Pace], seconds: list[float]) -> float | None:
        """Seconds to wait, or None if Redis cannot say."""
        keys = [PREFIX + ":".join(map(str, _parts(p.key))) for p in paces]
        try:
            waited = await self._script(keys=keys, args=[mode, *(round(s * 1000) for s in seconds)])
        except REDIS_DOWN as exc:
            if not self._down:
                log.warning(
                    "pacing sends in this replica alone: Redis is unreachable", error=str(exc)
                )
            self._down = True
            return None
        if self._down:
            log.info("pacing sends across replicas again")
        self._down = False
        return int(waited) / 1000


def _parts(key: object) -> tuple[object, ...]:
    return key if isinstance(key, tuple) else (key,)
