"""Singletons across replicas: work that must run in exactly one process at a time
(Telegram long polling, the coming Discord gateway connection), decided by a lease.

Every replica runs a `Leader` for the work; the one holding the lease starts it and
renews the lease while it runs. If that replica dies, the lease lapses within its ttl
and another replica's `Leader` claims it and starts the work there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta

import structlog

from memory.storage.leases import Leases

log = structlog.get_logger(__name__)

Step = Callable[[], Awaitable[None]]
LEASE_PREFIX = "leader:"


class Leader:
    def __init__(
        self,
        leases: Leases,
        name: str,
        start: Step,
        stop: Step,
        *,
        ttl: timedelta,
        state: Callable[[], str] | None = None,
    ) -> None:
        self._leases = leases
        self.name = f"{LEASE_PREFIX}{name}"
        self._start, self._stop = start, stop
        self._state = state
        self._ttl = ttl
        self._leading = False
        self._task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._leading:
            self._leading = False
            await self._stop()
            await self._leases.release(self.name)

    async def _run(self) -> None:
        while True:
            try:
                ours = await self._leases.claim(self.name, self._ttl, state=self._said())
            except Exception as exc:  # the database blinked: keep what runs, ask again
                log.warning("could not claim a leader lease", lease=self.name, error=str(exc))
            else:
                await self._follow(ours)
            await asyncio.sleep(self._ttl.total_seconds() / 3)

    def _said(self) -> str | None:
        """What the work says of itself, once it runs here."""
        return self._state() if self._state is not None and self._leading else None

    async def _follow(self, ours: bool) -> None:
        if ours and not self._leading:
            log.info("leading", lease=self.name)
            await self._start()
            self._leading = True
        elif not ours and self._leading:
            # This replica stalled past its ttl and another took over: stand down.
            log.warning("no longer leading", lease=self.name)
            self._leading = False
            await self._stop()
