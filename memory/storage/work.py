"""The memory's background work as operators see it: summaries to write, facts to take
from chunks, profiles to tidy — read from the database, which is the queue's truth —
and the switches that send a piece of it round again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.models import Chunk, ChunkStatus, Conversation, Profile

Kind = Literal["summarize", "extract", "tidy"]
KINDS: tuple[Kind, ...] = ("summarize", "extract", "tidy")
State = Literal["pending", "failed"]


@dataclass(frozen=True, slots=True)
class Job:
    kind: Kind
    # A chunk id (summarize, extract) or a person's id (tidy), as text.
    target: str
    state: State
    attempts: int
    last_error: str | None
    next_attempt_at: datetime | None
    conversation_id: uuid.UUID | None
    user_id: uuid.UUID | None

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.target}"


class Work:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def jobs(
        self, kind: Kind, state: State | None, *, after: str | None, limit: int
    ) -> list[Job]:
        """Jobs of one kind in `state` (None: any), a page at a time by target."""
        async with self._sessions() as session:
            if kind == "tidy":
                return await _tidies(session, state, after, limit)
            return await _chunk_jobs(session, kind, state, after, limit)

    async def job(self, kind: Kind, target: str) -> Job | None:
        """One job, if it is still to do."""
        async with self._sessions() as session:
            if kind == "tidy":
                found = await _tidies(session, None, None, 1, only=uuid.UUID(target))
            else:
                found = await _chunk_jobs(session, kind, None, None, 1, only=int(target))
        return found[0] if found else None

    async def reopen_chunk(self, chunk_id: int, now: datetime, *, ready_too: bool) -> bool:
        """Make a chunk due for a (new) summary now, unless a worker holds it. A ready
        chunk (only with `ready_too`) keeps its summary, and its row in the timeline,
        until the new one replaces it."""
        query = (
            update(Chunk)
            .where(Chunk.id == chunk_id, or_(Chunk.lease_until.is_(None), Chunk.lease_until < now))
            .values(
                status=ChunkStatus.PENDING,
                attempts=0,
                next_attempt_at=None,
                last_error=None,
                updated_at=now,
            )
            .returning(Chunk.id)
        )
        if not ready_too:
            query = query.where(Chunk.status != ChunkStatus.READY)
        async with self._sessions() as session:
            changed = await session.scalar(query)
            await session.commit()
        return changed is not None

    async def reopen_tidy(self, user_id: uuid.UUID) -> bool:
        """Let a profile's tidy run now, whatever its back-off said."""
        async with self._sessions() as session:
            changed = await session.scalar(
                update(Profile)
                .where(Profile.user_id == user_id, Profile.tidy_failures > 0)
                .values(tidy_not_before=None, tidy_after_chars=0)
                .returning(Profile.user_id)
            )
            await session.commit()
        return changed is not None


async def _chunk_jobs(
    session: AsyncSession,
    kind: Kind,
    state: State | None,
    after: str | None,
    limit: int,
    only: int | None = None,
) -> list[Job]:
    query = (
        select(Chunk, Conversation.user_id)
        .join(Conversation, Conversation.id == Chunk.conversation_id)
        .order_by(Chunk.id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(Chunk.id > int(after))
    if only is not None:
        query = query.where(Chunk.id == only)
    if kind == "summarize":
        states = [ChunkStatus(state)] if state else [ChunkStatus.PENDING, ChunkStatus.FAILED]
        query = query.where(Chunk.status.in_(states))
    else:
        if state == "failed":  # an extraction that fails is retried by the sweep
            return []
        query = query.where(
            Chunk.level == 0, Chunk.status == ChunkStatus.READY, Chunk.facts_extracted.is_(False)
        )
    return [_chunk_job(kind, chunk, user_id) for chunk, user_id in await session.execute(query)]


def _chunk_job(kind: Kind, chunk: Chunk, user_id: uuid.UUID | None) -> Job:
    summarizing = kind == "summarize"
    return Job(
        kind=kind,
        target=str(chunk.id),
        state="failed" if summarizing and chunk.status == ChunkStatus.FAILED else "pending",
        attempts=chunk.attempts if summarizing else 0,
        last_error=chunk.last_error if summarizing else None,
        next_attempt_at=chunk.next_attempt_at if summarizing else None,
        conversation_id=chunk.conversation_id,
        user_id=user_id,
    )


async def _tidies(
    session: AsyncSession,
    state: State | None,
    after: str | None,
    limit: int,
    only: uuid.UUID | None = None,
) -> list[Job]:
    # Only tidies that failed are work in waiting: the others run when a profile grows.
    if state == "pending":
        return []
    query = select(Profile).where(Profile.tidy_failures > 0).order_by(Profile.user_id).limit(limit)
    if after is not None:
        query = query.where(Profile.user_id > uuid.UUID(after))
    if only is not None:
        query = query.where(Profile.user_id == only)
    return [
        Job(
            kind="tidy",
            target=str(row.user_id),
            state="failed",
            attempts=row.tidy_failures,
            last_error=None,
            next_attempt_at=row.tidy_not_before,
            conversation_id=None,
            user_id=row.user_id,
        )
        for row in await session.scalars(query)
    ]
