"""The one lease keeper: renews a lease while its holder works and tells the holder
when the lease is lost, so the holder stops (or fences its writes).

Every lease in Parley is kept the same way: a conversation's turns, a delivery lane,
a singleton's leadership, a background job, a chunk being summarised. The keeper
renews every third of the ttl. A renewal that fails (the database blinked) is tried
again at the next tick and costs nothing by itself; the lease is lost only when a
renewal says it is no longer ours, or when it could not be renewed before it expired,
since from then on another replica may take it at any moment.

Expiry is counted on the clock the lease rows are written with, from the moment of
the claim or of the last renewal's start, so the keeper gives up no later than the
database would let another holder in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, TypeVar

import structlog

from gateway.tasks import alongside
from memory.storage.leases import LeaseLost, Leases

log = structlog.get_logger(__name__)

T = TypeVar("T")

# True: renewed, still ours; False: no longer ours. Raising: not renewed this time.
Renew = Callable[[], Awaitable[bool]]
Now = Callable[[], datetime]


class Fence(Protocol):
    def still_held(self) -> bool:
        """Whether the lease is ours: what a holder asks before each write."""
        ...


class LeaseKeeper:
    def __init__(
        self, name: str, renew: Renew, ttl: timedelta, *, since: datetime, now: Now
    ) -> None:
        self.name = name
        self._renew = renew
        self._ttl = ttl
        self._now = now
        self._expires = since + ttl
        # Set once, when the lease is lost: what a holder waits on to stop.
        self.lost = asyncio.Event()

    def still_held(self) -> bool:
        """Whether the lease is ours: what a holder asks before each write."""
        if not self.lost.is_set() and self._now() >= self._expires:
            self._lose("it expired before it could be renewed")
        return not self.lost.is_set()

    async def guard(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` while the lease is held: if it is lost first, `work` is cancelled
        and `LeaseLost` raised (its new holder does the work)."""
        task = asyncio.ensure_future(work)
        loss = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait((task, loss), return_when=asyncio.FIRST_COMPLETED)
        finally:
            loss.cancel()
            if not task.done():  # lost, or we are being cancelled ourselves
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled() and self.lost.is_set():
            raise LeaseLost(self.name)
        return task.result()

    async def run(self) -> None:
        """Renew every third of the ttl until the lease is lost."""
        while self.still_held():
            await asyncio.sleep(self._ttl.total_seconds() / 3)
            if self.still_held():
                await self._renew_once()

    async def _renew_once(self) -> None:
        started = self._now()
        try:
            # A renewal that hangs past the expiry is no renewal.
            async with asyncio.timeout((self._expires - started).total_seconds()):
                ours = await self._renew()
        except Exception as exc:  # the database blinked: the next tick tries again
            log.warning("could not renew a lease", lease=self.name, error=repr(exc))
            return
        if ours:
            self._expires = started + self._ttl
        else:
            self._lose("another holder has it")

    def _lose(self, why: str) -> None:
        log.warning("lost a lease", lease=self.name, why=why)
        self.lost.set()


@contextlib.asynccontextmanager
async def keep(
    name: str, renew: Renew, ttl: timedelta, *, since: datetime, now: Now
) -> AsyncIterator[LeaseKeeper]:
    """Keep a lease claimed at `since` (on the clock `now`) for as long as the block
    runs; the holder asks the keeper whether it still holds it."""
    keeper = LeaseKeeper(name, renew, ttl, since=since, now=now)
    async with alongside(keeper.run(), f"keep:{name}"):
        yield keeper


@contextlib.asynccontextmanager
async def hold(leases: Leases, name: str, ttl: timedelta) -> AsyncIterator[LeaseKeeper | None]:
    """Yield the keeper of `name` if we could take it (None: another holder has it);
    release it after, unless it was lost to another holder meanwhile."""
    since = leases.now()
    if not await leases.claim(name, ttl):
        yield None
        return
    renew = partial(leases.renew, name, ttl)
    try:
        async with keep(name, renew, ttl, since=since, now=leases.now) as kept:
            yield kept
    finally:
        await release(leases, name)


async def release(leases: Leases, name: str) -> None:
    """Give `name` up (only ever ours: a row another holder took stays theirs)."""
    try:
        await leases.release(name)
    except Exception as exc:  # unreleased, it lapses within its ttl
        log.warning("could not release a lease", lease=name, error=repr(exc))


class Unshared:
    """The lease of work no other process can do (an embedded database: one process
    by construction): always held."""

    def still_held(self) -> bool:
        return True
