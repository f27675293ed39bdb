"""Singletons across replicas: work that must run in exactly one process at a time
(Telegram long polling, the coming Discord gateway connection), decided by a lease.

Every replica runs a `Leader` for the work; the one holding the lease starts it and
keeps the lease while it runs (`gateway.replicas.lease_keeper`). If that replica dies,
the lease lapses within its ttl and another replica's `Leader` claims it and starts the
work there; if it only stalled past the ttl, or could not renew in time, it stops the
work as soon as its keeper says the lease is lost, and asks for it again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import structlog

from gateway.replicas.lease_keeper import keep
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
            since = await self._claim()
            if since is not None:
                await self._lead(since)
            await asyncio.sleep(self._ttl.total_seconds() / 3)

    async def _claim(self) -> datetime | None:
        """When we took the lease (None: another replica leads, or the database blinked)."""
        since = self._leases.now()
        try:
            ours = await self._leases.claim(self.name, self._ttl)
        except Exception as exc:  # the database blinked: ask again at the next tick
            log.warning("could not claim a leader lease", lease=self.name, error=repr(exc))
            return None
        return since if ours else None

    async def _lead(self, since: datetime) -> None:
        """Run the work until the lease is lost (or `close` cancels us)."""
        # Kept from the claim on: a slow start must not let the lease lapse.
        async with keep(
            self.name, self._renew, self._ttl, since=since, now=self._leases.now
        ) as lease:
            log.info("leading", lease=self.name)
            await self._start()
            self._leading = True
            await lease.lost.wait()
        log.warning("no longer leading", lease=self.name)
        self._leading = False
        await self._stop()

    async def _renew(self) -> bool:
        # Renewals carry what the work says of itself, once it runs (the dashboard
        # shows it).
        state = self._state() if self._state is not None and self._leading else None
        return await self._leases.renew(self.name, self._ttl, state=state)
