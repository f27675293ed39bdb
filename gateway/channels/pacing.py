"""Spacing sends so no platform limit is exceeded: per chat, per group, per bot.

`Pacer` keeps the schedule in this process; `RedisPacer` (in `shared_pacing`) keeps it in
Redis, so the limits hold for the bot as a whole however many replicas send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Protocol

from gateway.channels.port import Pace


class Pacing(Protocol):
    async def wait(self, paces: Sequence[Pace]) -> None:
        """Wait for a slot every key in `paces` allows, reserving it first."""
        ...

    async def hold(self, paces: Sequence[Pace], seconds: float) -> None:
        """Nothing sharing these keys goes out for `seconds` (a platform said so)."""
        ...

    async def aclose(self) -> None: ...


class Pacer:
    """The schedule in this process. A slot is reserved before waiting, so concurrent
    lanes queue up fairly. `monotonic` and `sleep` are the event loop's unless a test
    passes its own."""

    def __init__(
        self,
        monotonic: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._next: dict[Hashable, float] = {}
        self._monotonic = monotonic
        self._sleep = sleep

    def _now(self) -> float:
        return self._monotonic() if self._monotonic else asyncio.get_running_loop().time()

    async def wait(self, paces: Sequence[Pace]) -> None:
        if not paces:
            return
        now = self._now()
        start = max([now, *(self._next.get(p.key, 0.0) for p in paces)])
        for pace in paces:
            self._next[pace.key] = start + pace.interval
        if start > now:
            await self._sleep(start - now)

    async def hold(self, paces: Sequence[Pace], seconds: float) -> None:
        until = self._now() + seconds
        for pace in paces:
            self._next[pace.key] = max(self._next.get(pace.key, 0.0), until)

    async def aclose(self) -> None:
        """Nothing to release."""
