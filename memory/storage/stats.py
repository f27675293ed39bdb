"""What the dashboard charts: messages per day and channel, the prompt's size per turn,
when each channel last heard from someone or sent something, and how many replies wait."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.models import Delivery, Lease, Message, Role


@dataclass(frozen=True, slots=True)
class DayCount:
    day: str  # YYYY-MM-DD, UTC
    channel: str
    messages: int


@dataclass(frozen=True, slots=True)
class DayPrompt:
    day: str
    turns: int
    mean: int
    largest: int


@dataclass(frozen=True, slots=True)
class TurnPrompt:
    at: datetime  # when the reply was stored
    tokens: int


@dataclass(frozen=True, slots=True)
class Queue:
    """Work waiting: how much, and since when the oldest piece has (None: none waits)."""

    depth: int
    oldest_at: datetime | None


@dataclass(frozen=True, slots=True)
class ChannelSeen:
    channel: str
    last_inbound_at: datetime | None
    last_sent_at: datetime | None


@dataclass(frozen=True, slots=True)
class LeaseView:
    name: str
    holder: str
    expires_at: datetime
    state: str | None


class Stats:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def messages_per_day(self, since: datetime) -> list[DayCount]:
        async with self._sessions() as session:
            day = _day(session, Message.created_at)
            rows = await session.execute(
                select(day.label("day"), Message.channel, func.count().label("n"))
                .where(Message.created_at >= since)
                .group_by(day, Message.channel)
                .order_by(day, Message.channel)
            )
            return [DayCount(str(r.day), r.channel, r.n) for r in rows]

    async def prompt_per_day(self, since: datetime) -> list[DayPrompt]:
        async with self._sessions() as session:
            day = _day(session, Message.created_at)
            rows = await session.execute(
                select(
                    day.label("day"),
                    func.count().label("n"),
                    func.avg(Message.prompt_tokens).label("mean"),
                    func.max(Message.prompt_tokens).label("largest"),
                )
                .where(Message.created_at >= since, Message.prompt_tokens.is_not(None))
                .group_by(day)
                .order_by(day)
            )
            return [DayPrompt(str(r.day), r.n, round(r.mean), r.largest) for r in rows]

    async def prompt_per_turn(self, since: datetime, limit: int) -> list[TurnPrompt]:
        """The newest `limit` model replies since `since` with their prompt's size,
        oldest first."""
        async with self._sessions() as session:
            rows = await session.execute(
                select(Message.created_at, Message.prompt_tokens)
                .where(Message.created_at >= since, Message.prompt_tokens.is_not(None))
                .order_by(Message.created_at.desc(), Message.id.desc())
                .limit(limit)
            )
            return [TurnPrompt(r.created_at, r.prompt_tokens) for r in rows][::-1]

    async def deliveries_waiting(self) -> Queue:
        """Replies stored and not yet taken by their platform, oldest since written (the
        archive's queues are `memory.archive.reads.Backlog`)."""
        waiting = select(func.count(), func.min(Message.created_at)).where(
            Message.delivery == Delivery.PENDING
        )
        async with self._sessions() as session:
            depth, oldest_at = (await session.execute(waiting)).one()
        return Queue(int(depth), oldest_at)

    async def channels(self) -> list[ChannelSeen]:
        async with self._sessions() as session:
            inbound = await _latest(session, Message.role == Role.USER)
            sent = await _latest(
                session, Message.role != Role.USER, Message.delivery == Delivery.SENT
            )
        return [
            ChannelSeen(channel, inbound.get(channel), sent.get(channel))
            for channel in sorted(inbound.keys() | sent.keys())
        ]

    async def leases(self, prefix: str) -> list[LeaseView]:
        async with self._sessions() as session:
            rows = await session.scalars(select(Lease).where(Lease.name.startswith(prefix)))
            return [LeaseView(r.name, r.holder, r.expires_at, r.state) for r in rows]


async def _latest(session: AsyncSession, *where: Any) -> dict[str, datetime]:
    """The newest message's time per channel, of the messages `where` picks."""
    rows = await session.execute(
        select(Message.channel, func.max(Message.created_at).label("at"))
        .where(*where)
        .group_by(Message.channel)
    )
    return {row.channel: row.at for row in rows}


def _day(session: AsyncSession, column: Any) -> Any:
    """The UTC day of a time column, on either database."""
    if session.get_bind().dialect.name == "sqlite":
        return func.date(column)
    return func.date(func.timezone("UTC", column))
