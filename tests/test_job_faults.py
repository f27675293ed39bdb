"""Faults in the job machinery cost seconds, never answers: Redis down during turns,
queue keys orphaned by a killed worker, roll-ups around a chunk still pending."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from redis.asyncio import Redis
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.jobs.arq_worker import QUEUE_NAME, ArqQueue
from gateway.replicas.lease_keeper import hold
from memory.archive.archive import Archive
from memory.archive.numbers import MemoryLimits
from memory.archive.upkeep import EXTRACT, SUMMARIZE
from memory.storage.engine import create_engine, session_factory
from memory.storage.identities import Identities
from memory.storage.leases import Leases
from memory.storage.models import Chunk, ChunkStatus
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import make_settings, running_gateway
from tests.support.process import free_port

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


async def test_turns_are_answered_while_redis_is_down(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # Nothing listens there: every enqueue fails, as during a Redis outage.
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    settings = make_settings(
        database_url,
        tmp_path,
        llm,
        redis_url=dead_redis,
        llm_context_tokens=16_000,  # live window 2,500 tokens: the first turns cut chunks
        reply_wait_seconds=10,
    )
    long = "word " * 400
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        first = [await gw.send(token, f"{i} {long}") for i in range(8)]  # cuts: after_turn
        archive = gw.services.archive
        pending = await _pending(session_factory(gw.services.engine), uuid.UUID(conversation))
        assert pending, "the turns cut no chunk; the test needs smaller limits"
        # A worker summarises while Redis is still down; the next turn swaps it in and
        # queues a roll-up (before_turn), which fails too.
        await gw.services.jobs.run(SUMMARIZE, str(pending[0]))
        later = await gw.send(token, "and after the swap?")
        timeline = await archive.timeline(uuid.UUID(conversation))

    assert [r.status_code for r in first] == [200] * 8
    assert later.status_code == 200
    assert later.json()["reply"] is not None
    assert [row.id for row in timeline] == [pending[0]]


Sessions = async_sessionmaker[AsyncSession]


async def _pending(sessions: Sessions, conversation: uuid.UUID) -> list[int]:
    async with sessions() as session:
        rows = await session.scalars(
            select(Chunk.id)
            .where(Chunk.conversation_id == conversation, Chunk.status == ChunkStatus.PENDING)
            .order_by(Chunk.seq_start)
        )
        return list(rows)


async def test_keys_orphaned_by_a_killed_worker_block_a_retry_for_one_epoch_at_most(
    redis_url: str,
) -> None:
    clock = [1_000.0]
    queue = ArqQueue(redis_url, key_epoch=30, now=lambda: clock[0])
    await queue.start()
    client = Redis.from_url(redis_url)
    try:
        await queue.enqueue(EXTRACT, "7", key="extract:7")
        (job_id,) = [k.decode() for k in await client.zrange(QUEUE_NAME, 0, -1)]
        # What a worker killed mid-job leaves: the job and its in-progress mark.
        await client.set(f"arq:in-progress:{job_id}", b"1", ex=900)
        await queue.enqueue(EXTRACT, "7", key="extract:7")  # the same epoch: deduplicated
        same_epoch = await client.zcard(QUEUE_NAME)
        clock[0] += 30
        await queue.enqueue(EXTRACT, "7", key="extract:7")  # the sweep, one epoch later
        next_epoch = await client.zcard(QUEUE_NAME)
    finally:
        await client.aclose()
        await queue.close()

    assert same_epoch == 1
    assert next_epoch == 2


async def test_a_lease_lets_one_holder_work_and_lapses_when_it_dies(database_url: str) -> None:
    engine = create_engine(database_url)
    now = [NOW]
    sessions = session_factory(engine)
    alive = Leases(sessions, lambda: now[0], holder="alive")
    other = Leases(sessions, lambda: now[0], holder="other")
    try:
        ttl = timedelta(seconds=30)
        first = await alive.claim("job:extract:7", ttl)
        taken_while_held = await other.claim("job:extract:7", ttl)
        renewed = await alive.claim("job:extract:7", ttl)
        now[0] += timedelta(seconds=31)  # "alive" died and stopped renewing
        taken_after = await other.claim("job:extract:7", ttl)
        async with (
            hold(other, "job:rollup:1", ttl) as mine,
            hold(alive, "job:rollup:1", ttl) as theirs,
        ):
            pass
        async with hold(alive, "job:rollup:1", ttl) as released:
            pass
    finally:
        await engine.dispose()

    assert (first, taken_while_held, renewed, taken_after) == (True, False, True, True)
    assert (mine is not None, theirs is not None, released is not None) == (True, False, True)


async def test_a_rollup_waits_for_a_pending_chunk_instead_of_skipping_it(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    limits = MemoryLimits(consolidate_at=3, consolidate_count=2, rollup_keep=1, rollup_batch=2)
    archive = Archive(sessions, limits)
    try:
        ref = await Identities(sessions).resolve_identity(
            "webchat", "v1", display_name="", timezone="UTC", now=NOW
        )
        states = [READY, READY, PENDING, READY, READY, READY, READY]
        ids = await _chunks(sessions, ref.conversation_id, states)
        first = await archive.plan_rollups(ref.conversation_id, NOW)
        async with sessions() as session:
            await session.execute(
                update(Chunk).where(Chunk.id == ids[2]).values(status=READY, in_timeline=True)
            )
            await session.commit()
        second = await archive.plan_rollups(ref.conversation_id, NOW)
        parents = await _children_by_parent(sessions, ids)
    finally:
        await engine.dispose()

    # Before: only the two chunks ahead of the pending one could go, and they are two
    # of three needed. After it is ready, parents take consecutive runs, oldest first.
    assert first == []
    assert len(second) >= 2
    assert sorted(parents.values()) == [ids[0:2], ids[2:4], ids[4:6]]


READY, PENDING = ChunkStatus.READY, ChunkStatus.PENDING


async def _chunks(
    sessions: Sessions, conversation: uuid.UUID, states: list[ChunkStatus]
) -> list[int]:
    async with sessions() as session:
        rows = [
            Chunk(
                conversation_id=conversation,
                level=0,
                seq_start=10 * i + 1,
                seq_end=10 * i + 10,
                time_start=NOW,
                time_end=NOW,
                transcript="t",
                summary="s" if state is READY else None,
                status=state,
                in_timeline=state is READY,
                created_at=NOW,
                updated_at=NOW,
            )
            for i, state in enumerate(states)
        ]
        session.add_all(rows)
        await session.commit()
        return [row.id for row in rows]


async def _children_by_parent(sessions: Sessions, ids: list[int]) -> dict[int, list[int]]:
    async with sessions() as session:
        rows = (
            await session.execute(
                select(Chunk.parent_id, Chunk.id).where(Chunk.id.in_(ids)).order_by(Chunk.id)
            )
        ).all()
    parents: dict[int, list[int]] = {}
    for parent, child in rows:
        if parent is not None:
            parents.setdefault(parent, []).append(child)
    return parents
