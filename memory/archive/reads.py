"""Reading the archive: chunks, their summaries and transcripts, status — and the
bookkeeping of which chunks gave their facts to the profile.

These are the read-only ways below a summary (later model tools and REST): expand a
row into its children by id or date range, read a transcript (full-text search over
them is `memory.storage.search`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.messages import MESSAGE_COLUMNS, StoredMessage, message_view
from memory.storage.models import Chunk, ChunkStatus, Conversation, Message
from memory.storage.stats import Queue

# A chunk still waiting for its summary: pending, or failing and retried with backoff.
AWAITING_SUMMARY = Chunk.status.in_([ChunkStatus.PENDING, ChunkStatus.FAILED])
# A summarised leaf chunk whose facts are not taken into a profile yet.
FACTS_TO_TAKE = and_(
    Chunk.facts_extracted.is_(False), Chunk.status == ChunkStatus.READY, Chunk.level == 0
)


@dataclass(frozen=True, slots=True)
class ChunkView:
    id: int
    conversation_id: uuid.UUID
    level: int
    seq_start: int
    seq_end: int
    time_start: datetime
    time_end: datetime
    summary: str | None
    status: ChunkStatus
    attempts: int
    last_error: str | None
    parent_id: int | None


@dataclass(frozen=True, slots=True)
class ArchiveStatus:
    live_tokens: int
    chunks: dict[tuple[int, ChunkStatus], int]  # (level, status) -> count
    last_error: str | None
    last_error_at: datetime | None

    @property
    def pending_work(self) -> int:
        return sum(n for (_, state), n in self.chunks.items() if state is not ChunkStatus.READY)


@dataclass(frozen=True, slots=True)
class Backlog:
    """The archive's work across every conversation, for metrics and the dashboard.
    A queue's oldest is when its oldest chunk was cut."""

    chunks: dict[ChunkStatus, int]
    summaries: Queue  # chunks still waiting for their summary (`AWAITING_SUMMARY`)
    extractions: Queue  # summarised chunks whose facts are still to take (`FACTS_TO_TAKE`)


@dataclass(frozen=True, slots=True)
class Claim:
    """A chunk a worker holds the lease of, with what it needs to summarise it."""

    chunk: ChunkView
    content: str
    timezone: str


@dataclass(frozen=True, slots=True)
class NewChunk:
    id: int
    conversation_id: uuid.UUID
    level: int
    time_start: datetime
    transcript: str | None


def chunk_view(row: Any) -> ChunkView:
    """A view of a `Chunk`, or of a row with (at least) its view's columns."""
    return ChunkView(
        id=row.id,
        conversation_id=row.conversation_id,
        level=row.level,
        seq_start=row.seq_start,
        seq_end=row.seq_end,
        time_start=row.time_start,
        time_end=row.time_end,
        summary=row.summary,
        status=row.status,
        attempts=row.attempts,
        last_error=row.last_error,
        parent_id=row.parent_id,
    )


class ArchiveReads:
    """The reading half of `memory.archive.archive.Archive`: nothing here writes."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    # -- profile extraction bookkeeping -------------------------------------------------

    async def chunks_to_extract(self, limit: int = 100) -> list[int]:
        async with self._sessions() as session:
            rows = await session.scalars(
                select(Chunk.id).where(FACTS_TO_TAKE).order_by(Chunk.id).limit(limit)
            )
            return list(rows)

    async def backlog(self) -> Backlog:
        queues = select(
            func.count().filter(AWAITING_SUMMARY),
            func.min(Chunk.created_at).filter(AWAITING_SUMMARY),
            func.count().filter(FACTS_TO_TAKE),
            func.min(Chunk.created_at).filter(FACTS_TO_TAKE),
        )
        async with self._sessions() as session:
            counts = await session.execute(
                select(Chunk.status, func.count()).group_by(Chunk.status)
            )
            chunks = {ChunkStatus(status): int(n) for status, n in counts}
            summaries, summaries_at, extractions, extractions_at = (
                await session.execute(queues)
            ).one()
        return Backlog(
            chunks=chunks,
            summaries=Queue(int(summaries), summaries_at),
            extractions=Queue(int(extractions), extractions_at),
        )

    async def recent_summaries_of(self, user_id: uuid.UUID, count: int) -> list[str]:
        """The newest summaries of the person's own conversation, oldest first."""
        async with self._sessions() as session:
            rows = await session.scalars(
                select(Chunk.summary)
                .join(Conversation, Conversation.id == Chunk.conversation_id)
                .where(Conversation.user_id == user_id, Chunk.status == ChunkStatus.READY)
                .order_by(Chunk.time_end.desc())
                .limit(count)
            )
            return [s for s in rows if s][::-1]

    # -- reading ----------------------------------------------------------------------

    async def status(self, conversation_id: uuid.UUID) -> ArchiveStatus:
        async with self._sessions() as session:
            live = await session.scalar(
                select(func.coalesce(func.sum(Message.token_count), 0)).where(
                    Message.conversation_id == conversation_id, Message.chunk_id.is_(None)
                )
            )
            counts = await session.execute(
                select(Chunk.level, Chunk.status, func.count())
                .where(Chunk.conversation_id == conversation_id)
                .group_by(Chunk.level, Chunk.status)
            )
            error = await session.execute(
                select(Chunk.last_error, Chunk.updated_at)
                .where(Chunk.conversation_id == conversation_id, Chunk.last_error.is_not(None))
                .order_by(Chunk.updated_at.desc())
                .limit(1)
            )
            last = error.one_or_none()
        return ArchiveStatus(
            live_tokens=int(live or 0),
            chunks={(int(level), state): int(n) for level, state, n in counts},
            last_error=None if last is None else last[0],
            last_error_at=None if last is None else last[1],
        )

    async def chunk(self, chunk_id: int) -> ChunkView | None:
        async with self._sessions() as session:
            row = await session.get(Chunk, chunk_id)
        return None if row is None else chunk_view(row)

    async def conversation_of(self, chunk_id: int) -> uuid.UUID | None:
        async with self._sessions() as session:
            return await session.scalar(select(Chunk.conversation_id).where(Chunk.id == chunk_id))

    async def chunks(self, conversation_id: uuid.UUID) -> list[ChunkView]:
        async with self._sessions() as session:
            rows = await session.scalars(
                select(Chunk)
                .where(Chunk.conversation_id == conversation_id)
                .order_by(Chunk.level, Chunk.seq_start)
            )
            return [chunk_view(row) for row in rows]

    async def children(self, chunk_id: int) -> list[ChunkView]:
        async with self._sessions() as session:
            rows = await session.scalars(
                select(Chunk).where(Chunk.parent_id == chunk_id).order_by(Chunk.seq_start)
            )
            return [chunk_view(row) for row in rows]

    async def in_range(
        self, conversation_id: uuid.UUID, level: int, start: datetime, end: datetime
    ) -> list[ChunkView]:
        async with self._sessions() as session:
            rows = await session.scalars(
                select(Chunk)
                .where(
                    Chunk.conversation_id == conversation_id,
                    Chunk.level == level,
                    and_(Chunk.time_end >= start, Chunk.time_start <= end),
                )
                .order_by(Chunk.seq_start)
            )
            return [chunk_view(row) for row in rows]

    async def placed(
        self, conversation_id: uuid.UUID, seqs: Sequence[int]
    ) -> dict[int, tuple[StoredMessage, int | None]]:
        """Messages by seq, each with its level-0 chunk (None: not archived yet)."""
        if not seqs:
            return {}
        async with self._sessions() as session:
            rows = await session.scalars(
                select(Message).where(
                    Message.conversation_id == conversation_id, Message.seq.in_(seqs)
                )
            )
            return {row.seq: (message_view(row), row.chunk_id) for row in rows}

    async def transcript(self, chunk_id: int) -> str | None:
        async with self._sessions() as session:
            return await session.scalar(select(Chunk.transcript).where(Chunk.id == chunk_id))

    async def messages_of(self, chunk_id: int) -> list[StoredMessage]:
        async with self._sessions() as session:
            rows = await session.execute(
                select(*MESSAGE_COLUMNS).where(Message.chunk_id == chunk_id).order_by(Message.seq)
            )
            return [message_view(r) for r in rows]
