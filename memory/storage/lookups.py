"""Repository for lookups: the recall tool calls a turn made, for people to inspect."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.models import Lookup, Message


@dataclass(frozen=True, slots=True)
class NewLookup:
    tool: str
    arguments: str
    result: str


@dataclass(frozen=True, slots=True)
class LookupView:
    id: int
    conversation_id: uuid.UUID
    seq: int  # of the last message the turn answered
    tool: str
    arguments: str
    result: str
    created_at: datetime


class Lookups:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def record(
        self,
        conversation_id: uuid.UUID,
        message_id: int,
        lookups: list[NewLookup],
        *,
        now: datetime,
    ) -> None:
        if not lookups:
            return
        async with self._sessions() as session:
            session.add_all(
                Lookup(
                    conversation_id=conversation_id,
                    message_id=message_id,
                    tool=lookup.tool,
                    arguments=lookup.arguments,
                    result=lookup.result,
                    created_at=now,
                )
                for lookup in lookups
            )
            await session.commit()

    async def newest(
        self, conversation_id: uuid.UUID, *, before_id: int | None = None, limit: int
    ) -> list[LookupView]:
        """The conversation's lookups, newest first, a page at a time."""
        query = (
            select(Lookup, Message.seq)
            .join(Message, Message.id == Lookup.message_id)
            .where(Lookup.conversation_id == conversation_id)
            .order_by(Lookup.id.desc())
            .limit(limit)
        )
        if before_id is not None:
            query = query.where(Lookup.id < before_id)
        async with self._sessions() as session:
            rows = (await session.execute(query)).all()
        return [
            LookupView(
                lookup.id,
                lookup.conversation_id,
                seq,
                lookup.tool,
                lookup.arguments,
                lookup.result,
                lookup.created_at,
            )
            for lookup, seq in rows
        ]
