"""Reminders and follow-ups, and their firings.

A firing is one transaction: insert the fire row (unique on schedule and due time, so
a replica that finds it taken does nothing), move the schedule on, and store the message
that makes it a turn. Either all of it happened or none, whichever process dies when.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, Select, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.inserts import insert_or_skip
from memory.storage.messages import NewMessage, StoredMessage, store_message
from memory.storage.models import (
    Conversation,
    ConversationKind,
    FireOutcome,
    Message,
    Role,
    Schedule,
    ScheduleFire,
    ScheduleKind,
    ScheduleState,
    User,
)


@dataclass(frozen=True, slots=True)
class NewSchedule:
    conversation_id: uuid.UUID
    kind: ScheduleKind
    text: str
    starts_local: str
    zone: str
    repeat: str | None
    channel: str | None
    created_by: str
    next_local: str
    next_due_at: datetime


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    id: int
    conversation_id: uuid.UUID
    kind: ScheduleKind
    text: str
    starts_local: str
    zone: str
    repeat: str | None
    channel: str | None
    created_by: str
    created_at: datetime
    state: ScheduleState
    next_local: str | None
    next_due_at: datetime | None


_COLUMNS = (
    Schedule.id,
    Schedule.conversation_id,
    Schedule.kind,
    Schedule.text,
    Schedule.starts_local,
    Schedule.zone,
    Schedule.repeat,
    Schedule.channel,
    Schedule.created_by,
    Schedule.created_at,
    Schedule.state,
    Schedule.next_local,
    Schedule.next_due_at,
)


@dataclass(frozen=True, slots=True)
class Fire:
    schedule_id: int
    due_at: datetime
    fired_at: datetime
    outcome: FireOutcome
    missed: int
    detail: str | None


@dataclass(frozen=True, slots=True)
class Due:
    """A schedule that is due, with what its firing needs to know of its person."""

    schedule: StoredSchedule
    # The person's zone now (null for a group) and whether they take follow-ups.
    timezone: str | None
    follow_ups: bool
    user_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class Firing:
    """What one firing does: its row, where the schedule goes next (null `next_local`:
    it is done) and the message it stores, if any."""

    due_at: datetime
    outcome: FireOutcome
    missed: int
    detail: str | None
    next_local: str | None
    next_due_at: datetime | None
    message: NewMessage | None


@dataclass(frozen=True, slots=True)
class Held:
    """A firing held: there was nowhere to send it then."""

    fire_id: int
    due_at: datetime
    written: bool  # the person has typed a message since it was held
    schedule: StoredSchedule
    timezone: str | None  # the person's now


class Schedules:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], *, count_tokens: Callable[[str], int]
    ) -> None:
        self._sessions = sessions
        self._count_tokens = count_tokens

    async def add(self, new: NewSchedule, *, now: datetime) -> StoredSchedule:
        async with self._sessions() as session:
            row = Schedule(
                conversation_id=new.conversation_id,
                kind=new.kind,
                text=new.text,
                starts_local=new.starts_local,
                zone=new.zone,
                repeat=new.repeat,
                channel=new.channel,
                created_by=new.created_by,
                created_at=now,
                state=ScheduleState.ACTIVE,
                next_local=new.next_local,
                next_due_at=new.next_due_at,
            )
            session.add(row)
            await session.commit()
            return _view(row)

    async def get(self, schedule_id: int) -> StoredSchedule | None:
        async with self._sessions() as session:
            row = (
                await session.execute(select(*_COLUMNS).where(Schedule.id == schedule_id))
            ).one_or_none()
        return None if row is None else _view(row)

    async def pending(self, conversation_id: uuid.UUID) -> list[StoredSchedule]:
        """The conversation's active schedules, soonest first (the numbers `/reminders`
        shows)."""
        query = (
            select(*_COLUMNS)
            .where(
                Schedule.conversation_id == conversation_id,
                Schedule.state == ScheduleState.ACTIVE,
            )
            .order_by(Schedule.next_due_at, Schedule.id)
        )
        async with self._sessions() as session:
            return [_view(row) for row in await session.execute(query)]

    async def of_conversation(self, conversation_id: uuid.UUID) -> list[StoredSchedule]:
        """Every schedule of the conversation, newest first (active, done, cancelled)."""
        query = (
            select(*_COLUMNS)
            .where(Schedule.conversation_id == conversation_id)
            .order_by(Schedule.id.desc())
        )
        async with self._sessions() as session:
            return [_view(row) for row in await session.execute(query)]

    async def fires(self, schedule_id: int, limit: int) -> tuple[int, list[Fire]]:
        """How often a schedule fired, and its newest `limit` firings, newest first."""
        query = (
            select(
                ScheduleFire.schedule_id,
                ScheduleFire.due_at,
                ScheduleFire.fired_at,
                ScheduleFire.outcome,
                ScheduleFire.missed,
                ScheduleFire.detail,
            )
            .where(ScheduleFire.schedule_id == schedule_id)
            .order_by(ScheduleFire.due_at.desc())
            .limit(limit)
        )
        counted = select(func.count()).where(ScheduleFire.schedule_id == schedule_id)
        async with self._sessions() as session:
            newest = [Fire(*row) for row in await session.execute(query)]
            total = int(await session.scalar(counted) or 0) if len(newest) == limit else len(newest)
        return total, newest

    async def cancel(
        self, schedule_id: int, conversation_id: uuid.UUID | None = None
    ) -> StoredSchedule | None:
        """Cancel an active schedule (of `conversation_id` only, when given); what it was,
        or None if there is no such active schedule there."""
        query = (
            update(Schedule)
            .where(Schedule.id == schedule_id, Schedule.state == ScheduleState.ACTIVE)
            .values(state=ScheduleState.CANCELLED, next_local=None, next_due_at=None)
            .returning(*_COLUMNS)
        )
        if conversation_id is not None:
            query = query.where(Schedule.conversation_id == conversation_id)
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
            await session.commit()
        return None if row is None else _view(row)

    async def cancel_follow_ups(self, conversation_id: uuid.UUID) -> int:
        """Cancel the conversation's pending follow-ups; how many there were."""
        async with self._sessions() as session:
            result = await session.execute(
                update(Schedule)
                .where(
                    Schedule.conversation_id == conversation_id,
                    Schedule.kind == ScheduleKind.FOLLOW_UP,
                    Schedule.state == ScheduleState.ACTIVE,
                )
                .values(state=ScheduleState.CANCELLED, next_local=None, next_due_at=None)
            )
            await session.commit()
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

    async def set_follow_ups(self, user_id: uuid.UUID, on: bool) -> None:
        async with self._sessions() as session:
            await session.execute(update(User).where(User.id == user_id).values(follow_ups=on))
            await session.commit()

    async def follow_ups_on(self, user_id: uuid.UUID) -> bool:
        async with self._sessions() as session:
            on = await session.scalar(select(User.follow_ups).where(User.id == user_id))
        return bool(on)

    async def sent_follow_ups(self, conversation_id: uuid.UUID, since: datetime) -> int:
        """Follow-ups of the conversation that fired and were sent since `since`."""
        query = (
            select(func.count())
            .select_from(ScheduleFire)
            .join(Schedule, Schedule.id == ScheduleFire.schedule_id)
            .where(
                Schedule.conversation_id == conversation_id,
                Schedule.kind == ScheduleKind.FOLLOW_UP,
                ScheduleFire.fired_at >= since,
                ScheduleFire.outcome.in_([FireOutcome.SENT, FireOutcome.LATE]),
            )
        )
        async with self._sessions() as session:
            return int(await session.scalar(query) or 0)

    async def due(self, now: datetime, limit: int) -> list[Due]:
        """Schedules due by `now`, soonest first: one indexed query, whatever is due."""
        query = due_query(now, limit)
        async with self._sessions() as session:
            rows = (await session.execute(query)).all()
        found = []
        for row in rows:
            timezone: str | None = row.timezone
            user_id: uuid.UUID | None = row.user_id
            found.append(
                Due(_view(row[: len(_COLUMNS)]), timezone, row.follow_ups is not False, user_id)
            )
        return found

    async def move(self, schedule_id: int, due_at: datetime, next_due_at: datetime) -> bool:
        """Move a schedule's next due time (its person's zone changed), if it is still
        `due_at`."""
        async with self._sessions() as session:
            result = await session.execute(
                update(Schedule)
                .where(Schedule.id == schedule_id, Schedule.next_due_at == due_at)
                .values(next_due_at=next_due_at)
            )
            await session.commit()
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def of_person(self, user_id: uuid.UUID) -> list[StoredSchedule]:
        """The active schedules of a person's own conversation."""
        query = (
            select(*_COLUMNS)
            .join(Conversation, Conversation.id == Schedule.conversation_id)
            .where(
                Conversation.user_id == user_id,
                Conversation.kind == ConversationKind.PERSONAL,
                Schedule.state == ScheduleState.ACTIVE,
            )
        )
        async with self._sessions() as session:
            return [_view(row) for row in await session.execute(query)]

    async def held(self, limit: int) -> list[Held]:
        """Held firings not sent yet, each with whether its person has typed a message
        since it was held."""
        written = _written_since(ScheduleFire.fired_at).label("written")
        query = (
            select(ScheduleFire.id, ScheduleFire.due_at, written, *_COLUMNS, User.timezone)
            .join(Schedule, Schedule.id == ScheduleFire.schedule_id)
            .join(Conversation, Conversation.id == Schedule.conversation_id)
            .outerjoin(User, User.id == Conversation.user_id)
            .where(ScheduleFire.outcome == FireOutcome.HELD)
            .order_by(ScheduleFire.id)
            .limit(limit)
        )
        async with self._sessions() as session:
            rows = (await session.execute(query)).all()
        found = []
        for row in rows:
            timezone: str | None = row.timezone
            schedule = _view(row[3 : 3 + len(_COLUMNS)])
            found.append(Held(row[0], row[1], bool(row[2]), schedule, timezone))
        return found

    async def release(
        self, held: Held, message: NewMessage, *, now: datetime
    ) -> StoredMessage | None:
        """Store a held firing's message, once (its outcome turns to sent in the same
        transaction): None if another replica sent it already."""
        async with self._sessions() as session:
            taken = await session.execute(
                update(ScheduleFire)
                .where(ScheduleFire.id == held.fire_id, ScheduleFire.outcome == FireOutcome.HELD)
                .values(
                    outcome=FireOutcome.SENT,
                    detail=ScheduleFire.detail + "; sent once they wrote again",
                )
            )
            if not taken.rowcount:  # type: ignore[attr-defined]
                await session.rollback()
                return None
            tokens = self._count_tokens(message.text)
            conversation_id = held.schedule.conversation_id
            stored = await session.run_sync(
                lambda s: store_message(s.connection(), conversation_id, message, tokens, now)
            )
            if stored is None:
                await session.rollback()
                return None
            await session.execute(
                update(ScheduleFire)
                .where(ScheduleFire.id == held.fire_id)
                .values(message_id=stored.id)
            )
            await session.commit()
        return stored

    async def fire(
        self, schedule: StoredSchedule, firing: Firing, *, now: datetime
    ) -> tuple[bool, StoredMessage | None]:
        """Record one firing and store its message, in one transaction: `(False, None)`
        if this due time has fired already (another replica, or this one before a
        crash), else `(True, the message stored)`."""
        async with self._sessions() as session:
            fire_id = await session.scalar(
                insert_or_skip(session, ScheduleFire)
                .values(
                    schedule_id=schedule.id,
                    due_at=firing.due_at,
                    fired_at=now,
                    outcome=firing.outcome,
                    missed=firing.missed,
                    detail=firing.detail,
                )
                .returning(ScheduleFire.id)
            )
            if fire_id is None:
                await session.rollback()
                return False, None
            done = firing.next_local is None
            await session.execute(
                update(Schedule)
                .where(Schedule.id == schedule.id)
                .values(
                    next_local=firing.next_local,
                    next_due_at=firing.next_due_at,
                    state=ScheduleState.DONE if done else ScheduleState.ACTIVE,
                )
            )
            stored = None
            if firing.message is not None:
                message, tokens = firing.message, self._count_tokens(firing.message.text)
                stored = await session.run_sync(
                    lambda s: store_message(
                        s.connection(), schedule.conversation_id, message, tokens, now
                    )
                )
                if stored is not None:
                    await session.execute(
                        update(ScheduleFire)
                        .where(ScheduleFire.id == fire_id)
                        .values(message_id=stored.id)
                    )
            await session.commit()
        return True, stored


def _written_since(fired_at: Any) -> Any:
    """A message the person typed into the schedule's conversation after `fired_at`."""
    return (
        select(Message.id)
        .where(
            Message.conversation_id == Schedule.conversation_id,
            Message.role == Role.USER,
            Message.source.is_(None),
            Message.identity_id.is_not(None),
            Message.created_at > fired_at,
        )
        .exists()
    )


def due_query(now: datetime, limit: int) -> Select[*tuple[Any, ...]]:
    """The sweep's one question, answered from the due-time index (a schedule that is
    done or cancelled has no due time, so it is never in the index's range)."""
    return (
        select(*_COLUMNS, User.timezone, User.follow_ups, Conversation.user_id)
        .join(Conversation, Conversation.id == Schedule.conversation_id)
        .outerjoin(User, User.id == Conversation.user_id)
        .where(Schedule.next_due_at <= now)
        .order_by(Schedule.next_due_at)
        .limit(limit)
    )


def _view(row: Schedule | Row[tuple[object, ...]] | tuple[object, ...]) -> StoredSchedule:
    if isinstance(row, Schedule):
        return StoredSchedule(*(getattr(row, column.key) for column in _COLUMNS))
    return StoredSchedule(*row)  # type: ignore[arg-type]
