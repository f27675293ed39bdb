"""Repository for usage: the tokens model calls took, summed per person (or group),
per day of their zone, per model and kind of work (DESIGN §12).

A person's calls are charged to them (their user id), a group's to the group (its
conversation id): a group's turns count against nobody's own budget.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import CTE, Select, delete, func, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.model_usage import Usage
from memory.storage.inserts import dialect_insert
from memory.storage.models import Conversation, ConversationKind, UsageDay, UsageKind, User
from memory.storage.tables import USAGE_DAYS
from memory.zones import zone


@dataclass(frozen=True, slots=True)
class Payer:
    """Whom a conversation's model calls are charged to, and the zone of their days."""

    subject: uuid.UUID  # a person's user id, or a group's conversation id
    group: bool
    timezone: str

    def day(self, now: datetime) -> date:
        return now.astimezone(zone(self.timezone)).date()


@dataclass(frozen=True, slots=True)
class UsageRow:
    day: date
    subject: uuid.UUID
    group: bool
    kind: UsageKind
    model: str
    calls: int
    prompt: int
    cached: int
    completion: int


def payer_for(
    conversation_id: uuid.UUID, user_id: uuid.UUID | None, group: bool, timezone: str
) -> Payer:
    """Who pays for a conversation, from what a turn already read of it."""
    if group or user_id is None:
        return Payer(conversation_id, True, "UTC")
    return Payer(user_id, False, timezone)


async def payer_of(session: AsyncSession, conversation_id: uuid.UUID) -> Payer | None:
    found = (
        await session.execute(
            select(Conversation.kind, Conversation.user_id, User.timezone)
            .outerjoin(User, User.id == Conversation.user_id)
            .where(Conversation.id == conversation_id)
        )
    ).one_or_none()
    if found is None:
        return None
    kind, user_id, timezone = found
    return payer_for(conversation_id, user_id, kind == ConversationKind.GROUP, timezone or "UTC")


def charge(
    connection: Connection, payer: Payer, kind: UsageKind, usage: Sequence[Usage], now: datetime
) -> None:
    """Add `usage` to the payer's day, in `connection`'s transaction (one row per model)."""
    for row in charges(payer, kind, usage, now):
        _add(connection, row)


def charges(
    payer: Payer, kind: UsageKind, usage: Sequence[Usage], now: datetime
) -> list[dict[str, Any]]:
    """The rows `charge` adds to: one per model, with the calls' counts summed."""
    by_model: dict[str, list[Usage]] = {}
    for call in usage:
        by_model.setdefault(call.model, []).append(call)
    return [
        {
            "day": payer.day(now),
            "subject": payer.subject,
            "kind": kind,
            "model": model,
            "group": payer.group,
            "calls": len(calls),
            "prompt": sum(c.prompt for c in calls),
            "cached": sum(c.cached for c in calls),
            "completion": sum(c.completion for c in calls),
        }
        for model, calls in by_model.items()
    ]


async def move_usage(session: AsyncSession, absorbed: uuid.UUID, survivor: uuid.UUID) -> None:
    """Two people became one: the absorbed one's usage becomes the survivor's, in
    `session`'s transaction."""
    rows = (await session.scalars(select(UsageDay).where(UsageDay.subject == absorbed))).all()
    moved = [
        {column: getattr(row, column) for column in USAGE_COLUMNS} | {"subject": survivor}
        for row in rows
    ]
    await session.execute(delete(UsageDay).where(UsageDay.subject == absorbed))
    await session.run_sync(lambda s: _add_all(s.connection(), moved))


USAGE_COLUMNS = (
    "day",
    "subject",
    "kind",
    "model",
    "group",
    "calls",
    "prompt",
    "cached",
    "completion",
)


def _add_all(connection: Connection, rows: Sequence[dict[str, object]]) -> None:
    for row in rows:
        _add(connection, row)


def _add(connection: Connection, row: dict[str, object]) -> None:
    """Add `row`'s counts to its day's row, making it if there is none."""
    connection.execute(_adding(connection.dialect.name), row)


@functools.cache
def _adding(dialect: str) -> Any:
    """The upsert `_add` runs, built once per dialect (every turn charges one): the
    row's values are given to `execute`, so a charge costs no statement building."""
    return _on_conflict_add(dialect_insert(dialect, USAGE_DAYS))


def adding_cte(name: str, row_values: Select[Any]) -> CTE:
    """On PostgreSQL, `_add` as a CTE of a larger statement: the row is what
    `row_values` selects (the columns of `USAGE_COLUMNS`, in order; none, no charge)."""
    statement = postgresql.insert(USAGE_DAYS).from_select(USAGE_COLUMNS, row_values)
    upsert: CTE = _on_conflict_add(statement).cte(name)
    return upsert


def _on_conflict_add(statement: Any) -> Any:
    added = statement.excluded
    table = USAGE_DAYS.c
    return statement.on_conflict_do_update(
        index_elements=["day", "subject", "kind", "model"],
        set_={
            "calls": table.calls + added.calls,
            "prompt": table.prompt + added.prompt,
            "cached": table.cached + added.cached,
            "completion": table.completion + added.completion,
        },
    )


class UsageLedger:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def charge_conversation(
        self, conversation_id: uuid.UUID, kind: UsageKind, usage: Sequence[Usage], now: datetime
    ) -> None:
        """Charge `usage` to whoever pays for the conversation (nothing if it is gone)."""
        if not usage:
            return
        async with self._sessions() as session:
            payer = await payer_of(session, conversation_id)
            if payer is not None:
                await session.run_sync(lambda s: charge(s.connection(), payer, kind, usage, now))
                await session.commit()

    async def charge_person(
        self, user_id: uuid.UUID, kind: UsageKind, usage: Sequence[Usage], now: datetime
    ) -> None:
        if not usage:
            return
        async with self._sessions() as session:
            timezone = await session.scalar(select(User.timezone).where(User.id == user_id))
            if timezone is not None:
                payer = Payer(user_id, False, timezone)
                await session.run_sync(lambda s: charge(s.connection(), payer, kind, usage, now))
                await session.commit()

    async def payer(self, conversation_id: uuid.UUID) -> tuple[Payer, int | None] | None:
        """Who pays for the conversation, and (a person) their own daily cap."""
        async with self._sessions() as session:
            payer = await payer_of(session, conversation_id)
            if payer is None or payer.group:
                return None if payer is None else (payer, None)
            own = await session.scalar(select(User.daily_tokens).where(User.id == payer.subject))
        return payer, own

    async def spent(self, payer: Payer, day: date) -> int:
        """The tokens (prompt and completion) the payer's turns took on `day`."""
        async with self._sessions() as session:
            found = await session.scalar(
                select(func.coalesce(func.sum(UsageDay.prompt + UsageDay.completion), 0)).where(
                    UsageDay.day == day,
                    UsageDay.subject == payer.subject,
                    UsageDay.kind == UsageKind.TURN,
                )
            )
        return int(found or 0)

    async def names(self, subjects: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        """People's display names and groups' titles, by subject."""
        if not subjects:
            return {}
        async with self._sessions() as session:
            people = await session.execute(
                select(User.id, User.display_name).where(User.id.in_(subjects))
            )
            groups = await session.execute(
                select(Conversation.id, Conversation.title).where(Conversation.id.in_(subjects))
            )
            return dict([*people, *groups])

    async def rows(
        self, first: date, last: date, subject: uuid.UUID | None = None
    ) -> list[UsageRow]:
        """Every day's rows from `first` to `last` (both included), oldest first."""
        query = (
            select(UsageDay)
            .where(UsageDay.day >= first, UsageDay.day <= last)
            .order_by(UsageDay.day, UsageDay.subject, UsageDay.model, UsageDay.kind)
        )
        if subject is not None:
            query = query.where(UsageDay.subject == subject)
        async with self._sessions() as session:
            found = (await session.scalars(query)).all()
        return [
            UsageRow(
                r.day,
                r.subject,
                r.group,
                r.kind,
                r.model,
                r.calls,
                r.prompt,
                r.cached,
                r.completion,
            )
            for r in found
        ]
