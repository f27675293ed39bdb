"""Repository for watermarks: how far each platform chat's history has been read."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.inserts import insert_or_skip
from memory.storage.models import Watermark


@dataclass(frozen=True, slots=True)
class Place:
    """A chat on a platform, read up to `position`."""

    place: str
    position: int
    private: bool


class Watermarks:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def advance(
        self, channel: str, place: str, position: int, *, private: bool, now: datetime
    ) -> None:
        """Everything up to `position` in `place` is read. A watermark only moves
        forward: messages seen out of order (a backfill beside live events) never move
        it back."""
        key = (Watermark.channel == channel) & (Watermark.place == place)
        async with self._sessions() as session:
            await session.execute(
                insert_or_skip(session, Watermark).values(
                    channel=channel, place=place, position=position, private=private, updated_at=now
                )
            )
            await session.execute(
                update(Watermark)
                .where(key, Watermark.position < position)
                .values(position=position, updated_at=now)
            )
            await session.commit()

    async def recent(self, channel: str, *, since: datetime) -> list[Place]:
        """The channel's chats read from since `since`, oldest first."""
        query = (
            select(Watermark.place, Watermark.position, Watermark.private)
            .where(Watermark.channel == channel, Watermark.updated_at >= since)
            .order_by(Watermark.updated_at)
        )
        async with self._sessions() as session:
            return [Place(*row) for row in await session.execute(query)]
