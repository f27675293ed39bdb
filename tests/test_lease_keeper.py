"""The one lease keeper: a renewal that fails now and then costs nothing, a lease that
is lost stops its holder. Real lease rows on both databases; time moves only when a
test moves it (a stalled replica is one whose clock jumped past its ttl).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from functools import partial

from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.channels.leader import Leader
from gateway.replicas.lease_keeper import LeaseKeeper, keep
from memory.storage.leases import Leases
from tests.support.clock import ManualClock

Sessions = async_sessionmaker[AsyncSession]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
# Renewed every 0.1 s of real time; on a clock that stands still it never lapses.
TTL = timedelta(seconds=0.3)
Renew = Callable[[], Awaitable[bool]]


class FailsOnce:
    """A renew callable whose first call fails as a dropped database connection does;
    the others renew. `renewed` is set by the first renewal after the failure."""

    def __init__(self) -> None:
        self.calls = 0
        self.renewed = asyncio.Event()

    def wrap(self, renew: Renew) -> Renew:
        async def renew_or_fail() -> bool:
            self.calls += 1
            if self.calls == 1:
                raise OperationalError("UPDATE leases", {}, ConnectionResetError("reset"))
            ours = await renew()
            self.renewed.set()
            return ours

        return renew_or_fail

    def keep(
        self,
        name: str,
        renew: Renew,
        ttl: timedelta,
        *,
        since: datetime,
        now: Callable[[], datetime],
    ) -> AbstractAsyncContextManager[LeaseKeeper]:
        return keep(name, self.wrap(renew), ttl, since=since, now=now)


async def _database_down() -> bool:
    raise OperationalError("UPDATE leases", {}, ConnectionRefusedError("refused"))


async def test_the_keeper_survives_a_failed_renewal_and_loses_a_taken_or_lapsed_lease(
    sessions: Sessions,
) -> None:
    clock = ManualClock(NOW)
    ours = Leases(sessions, clock.now, holder="ours")
    theirs = Leases(sessions, clock.now, holder="theirs")
    renewals = FailsOnce()
    assert await ours.claim("job:a", TTL)
    renew = partial(ours.renew, "job:a", TTL)
    async with renewals.keep("job:a", renew, TTL, since=NOW, now=clock.now) as kept:
        async with asyncio.timeout(10):
            await renewals.renewed.wait()
        held_after_a_failure = kept.still_held()
        clock.advance(TTL * 2)
        taken = await theirs.claim("job:a", TTL)
        async with asyncio.timeout(10):
            await kept.lost.wait()
    assert await ours.claim("job:b", TTL)
    async with keep("job:b", _database_down, TTL, since=clock.now(), now=clock.now) as lapsing:
        held_before = lapsing.still_held()
        clock.advance(TTL)  # no renewal got through before the lease expired
        async with asyncio.timeout(10):
            await lapsing.lost.wait()

    assert (held_after_a_failure, taken, kept.still_held()) == (True, True, False)
    assert (held_before, lapsing.still_held()) == (True, False)


async def test_a_leader_whose_lease_was_taken_stops_its_work(sessions: Sessions) -> None:
    clock = ManualClock(NOW)
    started, stopped = asyncio.Event(), asyncio.Event()

    async def start() -> None:
        started.set()

    async def stop() -> None:
        stopped.set()

    leader = Leader(Leases(sessions, clock.now, holder="a"), "poll", start, stop, ttl=TTL)
    leader.begin()
    try:
        async with asyncio.timeout(10):
            await started.wait()
        clock.advance(TTL * 2)  # this replica stalled
        taken = await Leases(sessions, clock.now, holder="b").claim(leader.name, TTL)
        async with asyncio.timeout(10):
            await stopped.wait()
    finally:
        await leader.close()

    assert taken
