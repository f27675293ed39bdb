"""The archive: chunks of old messages, their summaries and the timeline they form.

Level 0 chunks are verbatim slices of messages, cut after a turn once the live window
passes its limit. When a level-0 summary is ready, the *next turn* swaps it in: in one
transaction its messages leave the live window and the chunk enters the timeline.
Ready level-0 chunks consolidate into level 1 (4 of 6, 2 stay as a buffer); any level
>= 1 rolls into the next in batches, keeping the newest few. A parent only replaces
its children in the timeline once its own summary is ready, so the timeline always
covers every archived message exactly once.

Who works on a chunk is decided here, not by the job queue: a worker must claim the
chunk's lease, so two workers never summarise the same chunk at once, and a killed
worker's lease simply runs out.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import defer

from memory.archive.cuts import plan_cut
from memory.archive.numbers import MemoryLimits
from memory.archive.reads import (
    ArchiveReads,
    ChunkView,
    Claim,
    NewChunk,
    chunk_view,
)
from memory.archive.timeline import timeline_roots, visible_rows
from memory.archive.transcript import render_transcript
from memory.provenance import dialogue
from memory.storage.engine import read
from memory.storage.live_window import bump_live_version
from memory.storage.messages import MESSAGE_COLUMNS, message_view
from memory.storage.models import Chunk, ChunkStatus, Conversation, Message, User


class Archive(ArchiveReads):
    """Cutting, swapping and rolling up chunks, and the leases of the work on them.
    Reading (status, digging below summaries) comes from `ArchiveReads`."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], limits: MemoryLimits) -> None:
        super().__init__(sessions)
        self.limits = limits

    # -- cutting and swapping (in the turn) -------------------------------------------

    async def cut(self, conversation_id: uuid.UUID, now: datetime) -> list[NewChunk]:
        """Cut pending level-0 chunks if the unarchived live messages outgrew the limit."""
        # One transaction, read to write, so it is one function: split, the reads and
        # the insert they justify would drift apart.
        async with self._sessions() as session:
            # Level-0 chunks are cut in seq order: the newest one ends the archive.
            last_end = (
                await session.scalar(
                    select(Chunk.seq_end)
                    .where(Chunk.conversation_id == conversation_id, Chunk.level == 0)
                    .order_by(Chunk.seq_start.desc())
                    .limit(1)
                )
                or 0
            )
            unarchived = (
                Message.conversation_id == conversation_id,
                Message.chunk_id.is_(None),
                Message.seq > last_end,
            )
            total = await session.scalar(
                select(func.coalesce(func.sum(Message.token_count), 0)).where(*unarchived)
            )
            if not total or total <= self.limits.live_window_tokens:
                return []
            answered, timezone = (
                await session.execute(
                    select(Conversation.answered_seq, User.timezone)
                    .outerjoin(User, User.id == Conversation.user_id)
                    .where(Conversation.id == conversation_id)
                )
            ).one()
            rows = await session.execute(
                select(*MESSAGE_COLUMNS).where(*unarchived).order_by(Message.seq)
            )
            slices = plan_cut([message_view(r) for r in rows], answered, self.limits)
            chunks = [
                Chunk(
                    conversation_id=conversation_id,
                    level=0,
                    seq_start=part[0].seq,
                    seq_end=part[-1].seq,
                    time_start=part[0].sent_at,
                    time_end=part[-1].sent_at,
                    transcript=render_transcript(part, timezone or "UTC"),
                    status=ChunkStatus.PENDING,
                    created_at=now,
                    updated_at=now,
                )
                for part in slices
            ]
            session.add_all(chunks)
            try:
                await session.commit()
            except IntegrityError:
                # Another replica cut the same slice first; its chunk stands.
                return []
        return [NewChunk(c.id, conversation_id, 0, c.time_start, c.transcript) for c in chunks]

    async def prepare_turn(self, conversation_id: uuid.UUID) -> tuple[bool, list[ChunkView]]:
        """At a turn's start: swap ready level-0 chunks in — in one transaction their
        messages leave the live window and they enter the timeline — then read the
        timeline. True if anything moved."""
        # Mostly there is nothing to swap: then the timeline is read on a plain
        # connection, without the transaction a swap needs.
        unswapped = await read(self._sessions, lambda c: _unless_swap_due(c, conversation_id))
        if unswapped is not None:
            return False, unswapped
        async with self._sessions() as session:
            roots = await session.run_sync(
                lambda s: timeline_roots(s.connection(), conversation_id)
            )
            ready = _ready_to_swap(roots)
            for chunk in ready:
                await session.execute(
                    update(Message)
                    .where(
                        Message.conversation_id == conversation_id,
                        Message.seq.between(chunk.seq_start, chunk.seq_end),
                        Message.chunk_id.is_(None),
                    )
                    .values(chunk_id=chunk.id)
                )
            if ready:
                # Their messages left the live window: kept copies of it are stale.
                await session.execute(bump_live_version([conversation_id]))
                await session.execute(
                    update(Chunk)
                    .where(Chunk.id.in_([chunk.id for chunk in ready]))
                    .values(in_timeline=True)
                )
                await session.commit()
            swapped = {chunk.id for chunk in ready}
            rows = await session.run_sync(lambda s: visible_rows(s.connection(), roots, swapped))
        return bool(ready), rows

    async def timeline(self, conversation_id: uuid.UUID) -> list[ChunkView]:
        """The rows the model sees, oldest first: every ready chunk in the timeline
        whose parent is not ready yet."""
        return await read(
            self._sessions, lambda c: visible_rows(c, timeline_roots(c, conversation_id))
        )

    # -- roll-ups (in jobs) -----------------------------------------------------------

    async def plan_rollups(self, conversation_id: uuid.UUID, now: datetime) -> list[NewChunk]:
        """Create pending parent chunks wherever a level has enough rows to roll up."""
        created: list[NewChunk] = []
        level = 0
        while True:
            made = await self._rollup_level(conversation_id, level, now)
            created += made
            if not made and not await self._has_level(conversation_id, level + 1):
                return created
            level += 1

    async def _has_level(self, conversation_id: uuid.UUID, level: int) -> bool:
        async with self._sessions() as session:
            found = await session.scalar(
                select(Chunk.id)
                .where(Chunk.conversation_id == conversation_id, Chunk.level == level)
                .limit(1)
            )
        return found is not None

    async def _rollup_level(
        self, conversation_id: uuid.UUID, level: int, now: datetime
    ) -> list[NewChunk]:
        # One transaction, read to write, so it is one function (as `cut`).
        if level == 0:
            threshold, size = self.limits.consolidate_at, self.limits.consolidate_count
        else:
            threshold = self.limits.rollup_keep + self.limits.rollup_batch
            size = self.limits.rollup_batch
        created = []
        async with self._sessions() as session:
            roots = await session.scalars(
                select(Chunk)
                .options(defer(Chunk.transcript), defer(Chunk.summary))
                .where(
                    Chunk.conversation_id == conversation_id,
                    Chunk.level == level,
                    Chunk.parent_id.is_(None),
                )
                .order_by(Chunk.seq_start)
            )
            # Only the oldest run of rollable chunks: a parent must cover consecutive
            # children, so a chunk still waiting for its summary holds back the ones
            # after it rather than being skipped (its parent would overlap theirs).
            candidates = list(itertools.takewhile(_rollable, roots))
            while len(candidates) >= threshold:
                group, candidates = candidates[:size], candidates[size:]
                parent = Chunk(
                    conversation_id=conversation_id,
                    level=level + 1,
                    seq_start=group[0].seq_start,
                    seq_end=group[-1].seq_end,
                    time_start=group[0].time_start,
                    time_end=group[-1].time_end,
                    status=ChunkStatus.PENDING,
                    created_at=now,
                    updated_at=now,
                )
                session.add(parent)
                await session.flush()
                adopted = await session.execute(
                    update(Chunk)
                    .where(Chunk.id.in_([c.id for c in group]), Chunk.parent_id.is_(None))
                    .values(parent_id=parent.id)
                )
                if adopted.rowcount != len(group):  # type: ignore[attr-defined]
                    await session.rollback()  # another job rolled these up meanwhile
                    return []
                created.append(
                    NewChunk(parent.id, conversation_id, level + 1, parent.time_start, None)
                )
            try:
                await session.commit()
            except IntegrityError:
                await session.rollback()
                return []
        return created

    # -- summarising (in jobs) --------------------------------------------------------

    async def claim(self, chunk_id: int, now: datetime, lease: timedelta) -> Claim | None:
        """Take the chunk's lease if it still needs a summary and nobody holds it."""
        async with self._sessions() as session:
            claimed = await session.execute(
                update(Chunk)
                .where(
                    Chunk.id == chunk_id,
                    Chunk.status != ChunkStatus.READY,
                    or_(Chunk.lease_until.is_(None), Chunk.lease_until < now),
                )
                .values(lease_until=now + lease, attempts=Chunk.attempts + 1, updated_at=now)
            )
            if claimed.rowcount != 1:  # type: ignore[attr-defined]
                await session.rollback()
                return None
            await session.commit()
            row = await session.get(Chunk, chunk_id)
            if row is None:  # erased since the claim (memory.storage.erasure)
                return None
            timezone = await session.scalar(
                select(User.timezone)
                .join(Conversation, Conversation.user_id == User.id)
                .where(Conversation.id == row.conversation_id)
            )
            timezone = timezone or "UTC"
            if row.level <= 1:
                content = await self._dialogue(session, row, timezone)
            else:
                content = await self._children_summaries(session, row)
        return Claim(chunk_view(row), content, timezone)

    async def _dialogue(self, session: AsyncSession, chunk: Chunk, timezone: str) -> str:
        """What levels 0 and 1 are written from: the whole text of their messages, as in
        the transcript, but without chat commands and the gateway's answers (the stored
        transcript keeps those: it is the verbatim record, not model input)."""
        rows = await session.execute(
            select(*MESSAGE_COLUMNS)
            .where(
                Message.conversation_id == chunk.conversation_id,
                Message.seq.between(chunk.seq_start, chunk.seq_end),
            )
            .order_by(Message.seq)
        )
        return render_transcript(dialogue([message_view(r) for r in rows]), timezone)

    async def _children_summaries(self, session: AsyncSession, parent: Chunk) -> str:
        """What levels 2 and up are written from: their children's summaries."""
        children = await session.scalars(
            select(Chunk).where(Chunk.parent_id == parent.id).order_by(Chunk.seq_start)
        )
        return "\n\n".join(
            f"[{child.time_start:%Y-%m-%d} – {child.time_end:%Y-%m-%d}]\n{child.summary or ''}"
            for child in children
        )

    async def renew(self, chunk_id: int, attempt: int, now: datetime, lease: timedelta) -> bool:
        """Extend the lease taken by claim number `attempt`; False once it is lost: it
        expired, another claim took the chunk (counting the next attempt), or the
        chunk is summarised or gone."""
        async with self._sessions() as session:
            renewed = await session.execute(
                update(Chunk)
                .where(*_held_by(chunk_id, attempt), Chunk.lease_until > now)
                .values(lease_until=now + lease)
            )
            await session.commit()
        return bool(renewed.rowcount)  # type: ignore[attr-defined]

    async def record_summary(
        self, chunk_id: int, summary: str, now: datetime, *, attempt: int
    ) -> bool:
        """Store the summary written under claim number `attempt`, once; False if the
        chunk was summarised already or claimed again since (its new holder writes)."""
        async with self._sessions() as session:
            done = await session.execute(
                update(Chunk)
                .where(*_held_by(chunk_id, attempt))
                .values(
                    summary=summary,
                    status=ChunkStatus.READY,
                    lease_until=None,
                    next_attempt_at=None,
                    last_error=None,
                    updated_at=now,
                )
            )
            await session.commit()
        return bool(done.rowcount)  # type: ignore[attr-defined]

    async def record_failure(
        self,
        chunk_id: int,
        error: str,
        now: datetime,
        retry_at: datetime,
        *,
        attempt: int,
        failed: bool,
    ) -> bool:
        """Note that claim number `attempt` failed (nothing, if the chunk was claimed
        again since: its new holder's lease stays). True when the person should be
        told: the first chunk of their conversation to be marked failed while none
        other is (once per outage)."""
        async with self._sessions() as session:
            row = await session.get(Chunk, chunk_id, with_for_update=True)
            if row is None or row.status == ChunkStatus.READY or row.attempts != attempt:
                return False
            # Serialise the "anyone told yet?" check per conversation (no-op on SQLite,
            # whose writers are serial anyway).
            await session.execute(
                select(Conversation.id)
                .where(Conversation.id == row.conversation_id)
                .with_for_update()
            )
            already_told = await session.scalar(
                select(func.count()).where(
                    Chunk.conversation_id == row.conversation_id,
                    Chunk.status == ChunkStatus.FAILED,
                    Chunk.user_notified.is_(True),
                )
            )
            tell = failed and not row.user_notified and not already_told
            row.last_error = error[:2000]
            row.lease_until = None
            row.next_attempt_at = retry_at
            row.updated_at = now
            if failed:
                row.status = ChunkStatus.FAILED
                row.user_notified = True
            await session.commit()
        return tell

    # -- finding work (sweeper) -------------------------------------------------------

    async def due_chunks(
        self, now: datetime, grace: timedelta, limit: int = 100
    ) -> list[tuple[int, int]]:
        """Chunks that need a summary and that no worker holds, as (id, attempts).

        Marks them not due again for `grace`, so a queued job is not queued twice by
        the next sweep; if the queue lost it, the sweep after that finds it again.
        """
        async with self._sessions() as session:
            rows = (
                await session.execute(
                    select(Chunk.id, Chunk.attempts)
                    .where(
                        # IN, not "!= ready", so the (status, next_attempt_at) index serves it.
                        Chunk.status.in_([ChunkStatus.PENDING, ChunkStatus.FAILED]),
                        or_(Chunk.next_attempt_at.is_(None), Chunk.next_attempt_at <= now),
                        or_(Chunk.lease_until.is_(None), Chunk.lease_until < now),
                    )
                    .order_by(Chunk.id)
                    .limit(limit)
                )
            ).all()
            if rows:
                await session.execute(
                    update(Chunk)
                    .where(Chunk.id.in_([r[0] for r in rows]))
                    .values(next_attempt_at=now + grace)
                )
                await session.commit()
        return [(int(r[0]), int(r[1])) for r in rows]

    async def mark_extracted(self, chunk_id: int) -> None:
        async with self._sessions() as session:
            await session.execute(
                update(Chunk).where(Chunk.id == chunk_id).values(facts_extracted=True)
            )
            await session.commit()

    async def conversations_to_roll_up(self) -> list[uuid.UUID]:
        """Conversations with a level that has enough parentless ready chunks to roll up."""
        threshold = case(
            (Chunk.level == 0, self.limits.consolidate_at),
            else_=self.limits.rollup_keep + self.limits.rollup_batch,
        )
        rollable = case(
            (
                and_(
                    Chunk.status == ChunkStatus.READY,
                    or_(Chunk.level > 0, Chunk.in_timeline.is_(True)),
                ),
                1,
            ),
            else_=0,
        )
        # Only `parent_id IS NULL` in the WHERE: it reads the few roots of each
        # conversation through their index, never every ready chunk.
        query = (
            select(Chunk.conversation_id)
            .where(Chunk.parent_id.is_(None))
            .group_by(Chunk.conversation_id, Chunk.level)
            .having(func.sum(rollable) >= threshold)
        )
        async with self._sessions() as session:
            return list(set(await session.scalars(query)))


def _rollable(chunk: Chunk) -> bool:
    # A level-0 chunk rolls up only once its messages left the live window; else its
    # parent could show beside them.
    return chunk.status == ChunkStatus.READY and (chunk.level > 0 or chunk.in_timeline)


def _held_by(chunk_id: int, attempt: int) -> tuple[ColumnElement[bool], ...]:
    """The chunk still needs the summary of claim number `attempt`: each claim counts
    an attempt, so a later claim (after the lease lapsed) fences out the earlier one."""
    return (Chunk.id == chunk_id, Chunk.status != ChunkStatus.READY, Chunk.attempts == attempt)


def _unless_swap_due(connection: Connection, conversation_id: uuid.UUID) -> list[ChunkView] | None:
    """The timeline, unless a chunk is ready to be swapped in (None)."""
    roots = timeline_roots(connection, conversation_id)
    return None if _ready_to_swap(roots) else visible_rows(connection, roots)


def _ready_to_swap(roots: list[Any]) -> list[Any]:
    """Level-0 chunks summarised and not yet in the timeline: their messages leave the
    live window at the next turn's start."""
    return [
        r for r in roots if r.level == 0 and r.status == ChunkStatus.READY and not r.in_timeline
    ]
