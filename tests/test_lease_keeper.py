"""The one lease keeper: a renewal that fails now and then costs nothing, a lease that
is lost stops its holder. Real lease rows and chunk rows on both databases; time moves
only when a test moves it (a stalled replica is one whose clock jumped past its ttl).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from functools import partial

from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.replicas.leader import Leader
from gateway.replicas.lease_keeper import LeaseKeeper, keep
from gateway.replicas.sweeps import sweep_forever
from memory.archive.archive import Archive
from memory.archive.numbers import MemoryLimits
from memory.archive.summarize import Kind
from memory.archive.upkeep import ArchiveJobs, KeepLease, RetryPolicy
from memory.storage.identities import Identities
from memory.storage.leases import Leases
from memory.storage.messages import Messages
from memory.storage.models import Chunk, ChunkStatus
from memory.token_count import message_tokens
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


class Model:
    """A summariser that writes once `gate` opens; `stopped`: its call was cancelled."""

    def __init__(self, summary: str, gate: asyncio.Event) -> None:
        self.summary = summary
        self.gate = gate
        self.started = asyncio.Event()
        self.stopped = False

    async def summarize(self, text: str, *, kind: Kind, target_tokens: int) -> str:
        self.started.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.stopped = True
            raise
        return self.summary


async def _nothing(job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
    return None


def _jobs(
    sessions: Sessions, model: Model, clock: ManualClock, keep_lease: KeepLease = keep
) -> ArchiveJobs:
    return ArchiveJobs(
        archive=Archive(sessions, MemoryLimits()),
        messages=Messages(sessions, count_tokens=message_tokens),
        summarizer=model,
        enqueue=_nothing,
        now=clock.now,
        lease=TTL,
        retry=RetryPolicy(1, 10, 3),
        keep=keep_lease,
        sweep_grace=timedelta(minutes=1),
    )


async def _pending_chunk(sessions: Sessions) -> int:
    ref = await Identities(sessions).resolve_identity(
        "webchat", "v1", display_name="", timezone="UTC", now=NOW
    )
    async with sessions() as session:
        chunk = Chunk(
            conversation_id=ref.conversation_id,
            level=0,
            seq_start=1,
            seq_end=10,
            time_start=NOW,
            time_end=NOW,
            transcript="t",
            status=ChunkStatus.PENDING,
            created_at=NOW,
            updated_at=NOW,
        )
        session.add(chunk)
        await session.commit()
        return chunk.id


async def _chunk(sessions: Sessions, chunk_id: int) -> Chunk:
    async with sessions() as session:
        chunk = await session.get(Chunk, chunk_id)
    assert chunk is not None
    return chunk


async def test_a_renewal_that_fails_once_loses_no_summary_the_model_wrote(
    sessions: Sessions,
) -> None:
    chunk_id = await _pending_chunk(sessions)
    renewals = FailsOnce()
    # The model writes once the keeper has renewed after its failed renewal.
    model = Model("the summary", gate=renewals.renewed)
    jobs = _jobs(sessions, model, ManualClock(NOW), renewals.keep)

    async with asyncio.timeout(10):
        await jobs.summarize(chunk_id)
    chunk = await _chunk(sessions, chunk_id)

    assert renewals.calls >= 2
    assert (chunk.status, chunk.summary, chunk.last_error) == (
        ChunkStatus.READY,
        "the summary",
        None,
    )


async def test_a_summariser_whose_lease_was_taken_stops_and_stores_nothing(
    sessions: Sessions,
) -> None:
    chunk_id = await _pending_chunk(sessions)
    clock = ManualClock(NOW)
    stalled = Model("the stalled replica's", gate=asyncio.Event())  # never writes by itself
    gate = asyncio.Event()
    taker = Model("the new holder's", gate=gate)

    first = asyncio.create_task(_jobs(sessions, stalled, clock).summarize(chunk_id))
    await stalled.started.wait()
    clock.advance(TTL * 2)  # the first replica stalled past its lease
    second = asyncio.create_task(_jobs(sessions, taker, clock).summarize(chunk_id))
    await taker.started.wait()  # the chunk was claimed again
    async with asyncio.timeout(10):
        await first  # the first one's keeper saw the loss and stopped its model call
    gate.set()
    await second
    chunk = await _chunk(sessions, chunk_id)

    assert stalled.stopped
    assert (chunk.status, chunk.summary, chunk.last_error) == (
        ChunkStatus.READY,
        "the new holder's",
        None,
    )


async def test_an_overtaken_claim_can_neither_renew_nor_store_nor_record_a_failure(
    sessions: Sessions,
) -> None:
    # What a replica that stalled between its keeper's check and its write meets.
    chunk_id = await _pending_chunk(sessions)
    archive = Archive(sessions, MemoryLimits())
    first = await archive.claim(chunk_id, NOW, TTL)
    later = NOW + TTL * 2
    second = await archive.claim(chunk_id, later, TTL)
    assert first is not None
    assert second is not None
    stale = first.chunk.attempts

    renewed = await archive.renew(chunk_id, stale, later, TTL)
    stored = await archive.record_summary(chunk_id, "stale", later, attempt=stale)
    told = await archive.record_failure(chunk_id, "late", later, later, attempt=stale, failed=True)
    overtaken = await _chunk(sessions, chunk_id)
    renewed_by_holder = await archive.renew(chunk_id, second.chunk.attempts, later, TTL)
    stored_by_holder = await archive.record_summary(
        chunk_id, "fresh", later, attempt=second.chunk.attempts
    )

    assert (renewed, stored, told) == (False, False, False)
    assert (overtaken.summary, overtaken.last_error) == (None, None)
    assert overtaken.lease_until == later + TTL  # the new holder's lease stands
    assert (renewed_by_holder, stored_by_holder) == (True, True)


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


async def test_one_replica_sweeps_at_a_time_and_a_failed_sweep_is_tried_again(
    sessions: Sessions,
) -> None:
    """Two replicas' sweeps share a lease: only its holder sweeps; a sweep that fails
    (the database briefly down) is logged and run again at the next interval."""
    clock = ManualClock(NOW)
    swept = {"a": 0, "b": 0}
    again = asyncio.Event()

    async def sweep(replica: str) -> None:
        swept[replica] += 1
        if swept[replica] == 1:
            raise OperationalError("SELECT", {}, ConnectionResetError("reset"))
        again.set()

    replicas = [
        asyncio.create_task(
            sweep_forever(
                partial(sweep, name),
                0.01,
                name="test",
                leases=Leases(sessions, clock.now, holder=name),
                at_once=True,
            )
        )
        for name in ("a", "b")
    ]
    try:
        await asyncio.wait_for(again.wait(), timeout=10)
    finally:
        for task in replicas:
            task.cancel()
        await asyncio.gather(*replicas, return_exceptions=True)

    assert sorted(swept.values())[0] == 0  # the other replica never swept
    assert max(swept.values()) >= 2  # failed once, then swept again


async def test_a_lease_is_one_holders_until_it_lapses_or_is_released(sessions: Sessions) -> None:
    clock = ManualClock(NOW)
    ours = Leases(sessions, clock.now, holder="ours")
    theirs = Leases(sessions, clock.now, holder="theirs")
    assert await ours.claim("turn:x", TTL, state="working")
    assert not await theirs.claim("turn:x", TTL)  # live, and not theirs
    assert await ours.claim("turn:x", TTL)  # ours already: claimed again, extended
    await theirs.release("turn:x")  # not theirs to release
    assert not await theirs.renew("turn:x", TTL)
    clock.advance(TTL * 2)
    assert not await ours.renew("turn:x", TTL)  # lapsed
    assert await theirs.claim("turn:x", TTL)
    await theirs.release("turn:x")
    assert await ours.claim("turn:x", TTL)


async def test_of_many_claiming_one_lease_at_once_exactly_one_gets_it(sessions: Sessions) -> None:
    clock = ManualClock(NOW)
    claimers = [Leases(sessions, clock.now, holder=f"h{n}") for n in range(8)]
    for _ in ("a new lease", "one lapsed"):
        got = await asyncio.gather(*(c.claim("race", TTL) for c in claimers))
        assert sum(got) == 1, got
        clock.advance(TTL * 2)
