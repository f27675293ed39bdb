"""Who is here, as operators look it up: people with their identities, and the
conversations with the filters the REST API offers. Lists page by keyset, newest first,
so a page never shifts while new people and conversations arrive.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Select, and_, exists, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.conversations import ConversationView, conversation_view
from memory.storage.models import (
    Chunk,
    ChunkStatus,
    Conversation,
    ConversationKind,
    Delivery,
    Identity,
    Message,
    PairingRequest,
    User,
)
from memory.storage.pairing import pending

# (created_at, id) of the last row shown: the next page starts after it.
After = tuple[datetime, uuid.UUID]


@dataclass(frozen=True, slots=True)
class IdentityView:
    id: uuid.UUID
    channel: str
    external_id: str
    display_name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class PersonView:
    id: uuid.UUID
    display_name: str
    timezone: str
    created_at: datetime
    identities: tuple[IdentityView, ...]
    conversations: tuple[uuid.UUID, ...]  # their own (groups belong to no one)
    # Their own daily token cap (None: the deployment's PARLEY_DAILY_TOKENS_PER_PERSON).
    daily_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class PersonState:
    """What may need an operator in a person's own conversation."""

    owes_reply: bool = False  # a message of theirs is still unanswered
    failed_deliveries: int = 0
    archive_errors: int = 0  # chunks whose summary keeps failing
    # One of their identities asked to be let in on a `pairing` channel and waits.
    pairing_pending: bool = False


class Need(StrEnum):
    """What an operator may look for in a person's own conversation."""

    REPLY = "reply"  # a message of theirs is still unanswered
    DELIVERY = "delivery"  # a reply the platform refused
    ARCHIVE = "archive"  # a summary that keeps failing
    PAIRING = "pairing"  # an identity's pairing request waits for an operator


@dataclass(frozen=True, slots=True)
class SessionFilter:
    kind: ConversationKind | None = None
    user_id: uuid.UUID | None = None
    channel: str | None = None
    q: str | None = None  # in the title, the person's name or an identity's name
    active_since: datetime | None = None


class Directory:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def conversations(
        self, where: SessionFilter, *, after: After | None, limit: int
    ) -> list[ConversationView]:
        query = _newest_first(select(Conversation), Conversation, after).limit(limit)
        for condition in _conditions(where):
            query = query.where(condition)
        async with self._sessions() as session:
            return [conversation_view(row) for row in await session.scalars(query)]

    async def people(
        self,
        q: str | None,
        *,
        after: After | None,
        limit: int,
        said_in: Sequence[uuid.UUID] = (),
        needs: Need | None = None,
        now: datetime,
    ) -> list[PersonView]:
        """`q` in a name, or (`said_in`) people whose own conversation is one of these;
        `needs`: only people whose conversation (or identity) needs that."""
        query = _newest_first(select(User), User, after).limit(limit)
        if needs is not None:
            query = query.where(_needing(needs, now))
        if q:
            named = or_(_has(User.display_name, q), _identity_named(User.id, q))
            said = exists().where(Conversation.user_id == User.id, Conversation.id.in_(said_in))
            query = query.where(or_(named, said) if said_in else named)
        async with self._sessions() as session:
            users = list(await session.scalars(query))
            return [await _person(session, user) for user in users]

    async def states(
        self, user_ids: Sequence[uuid.UUID], *, now: datetime
    ) -> dict[uuid.UUID, PersonState]:
        if not user_ids:
            return {}
        own = Conversation.user_id.in_(user_ids)
        async with self._sessions() as session:
            owing = {
                row.user_id
                for row in await session.execute(
                    select(Conversation.user_id).where(
                        own, Conversation.last_user_seq > Conversation.answered_seq
                    )
                )
            }
            failed = await _count_per_person(
                session, own, Message, Message.delivery == Delivery.FAILED
            )
            stuck = await _count_per_person(session, own, Chunk, Chunk.status == ChunkStatus.FAILED)
            asking = set(
                await session.scalars(
                    select(Identity.user_id).where(
                        Identity.user_id.in_(user_ids), _asking(Identity, now)
                    )
                )
            )
        return {
            user: PersonState(
                user in owing, failed.get(user, 0), stuck.get(user, 0), user in asking
            )
            for user in user_ids
        }

    async def person(self, user_id: uuid.UUID) -> PersonView | None:
        async with self._sessions() as session:
            user = await session.get(User, user_id)
            return None if user is None else await _person(session, user)

    async def set_daily_tokens(self, user_id: uuid.UUID, tokens: int | None) -> bool:
        """Set the person's own daily token cap (None: back to the deployment's); False
        if there is no such person."""
        async with self._sessions() as session:
            found = await session.scalar(
                update(User)
                .where(User.id == user_id)
                .values(daily_tokens=tokens)
                .returning(User.id)
            )
            await session.commit()
        return found is not None

    async def identity_owner(self, identity_id: uuid.UUID) -> uuid.UUID | None:
        async with self._sessions() as session:
            return await session.scalar(select(Identity.user_id).where(Identity.id == identity_id))

    async def timezone_of(self, conversation_id: uuid.UUID) -> str | None:
        """The time zone of a personal conversation's person; None for a group."""
        async with self._sessions() as session:
            return await session.scalar(
                select(User.timezone)
                .join(Conversation, Conversation.user_id == User.id)
                .where(Conversation.id == conversation_id)
            )

    async def rename(
        self, conversation_id: uuid.UUID, *, title: str | None, timezone: str | None
    ) -> bool:
        """Set the title and (a personal conversation's person's) time zone; False if
        the conversation is gone."""
        async with self._sessions() as session:
            conversation = await session.get(Conversation, conversation_id)
            if conversation is None:
                return False
            if title is not None:
                conversation.title = title
            if timezone is not None and conversation.user_id is not None:
                await session.execute(
                    update(User).where(User.id == conversation.user_id).values(timezone=timezone)
                )
            await session.commit()
        return True


def _newest_first(query: Select[Any], table: Any, after: After | None) -> Select[Any]:
    query = query.order_by(table.created_at.desc(), table.id.desc())
    if after is not None:
        at, last_id = after
        query = query.where(
            or_(table.created_at < at, and_(table.created_at == at, table.id < last_id))
        )
    return query


def _conditions(where: SessionFilter) -> list[Any]:
    conditions: list[Any] = []
    if where.kind is not None:
        conditions.append(Conversation.kind == where.kind)
    if where.user_id is not None:
        conditions.append(Conversation.user_id == where.user_id)
    if where.active_since is not None:
        conditions.append(Conversation.last_message_at >= where.active_since)
    if where.channel is not None:
        on_channel = exists().where(
            Identity.user_id == Conversation.user_id, Identity.channel == where.channel
        )
        conditions.append(or_(Conversation.channel == where.channel, on_channel))
    if where.q:
        named = exists().where(User.id == Conversation.user_id, _has(User.display_name, where.q))
        conditions.append(
            or_(
                _has(Conversation.title, where.q),
                named,
                _identity_named(Conversation.user_id, where.q),
            )
        )
    return conditions


def _needing(need: Need, now: datetime) -> Any:
    own = Conversation.user_id == User.id
    if need is Need.PAIRING:
        return exists().where(Identity.user_id == User.id, _asking(Identity, now))
    if need is Need.REPLY:
        return exists().where(own, Conversation.last_user_seq > Conversation.answered_seq)
    rows, condition = (
        (Message, Message.delivery == Delivery.FAILED)
        if need is Need.DELIVERY
        else (Chunk, Chunk.status == ChunkStatus.FAILED)
    )
    return exists().where(own, rows.conversation_id == Conversation.id, condition)


def _asking(identity: type[Identity], now: datetime) -> Any:
    """The identity has a pairing request waiting (not approved, not expired)."""
    return exists().where(
        PairingRequest.channel == identity.channel,
        PairingRequest.external_id == identity.external_id,
        pending(now),
    )


async def _count_per_person(
    session: AsyncSession, own: Any, rows: type[Message] | type[Chunk], condition: Any
) -> dict[uuid.UUID, int]:
    """How many `rows` of each person's own conversation meet `condition`."""
    found = await session.execute(
        select(Conversation.user_id, func.count().label("n"))
        .join(rows, rows.conversation_id == Conversation.id)
        .where(own, condition)
        .group_by(Conversation.user_id)
    )
    return {row.user_id: row.n for row in found}


def _has(column: Any, needle: str) -> Any:
    """`column` contains `needle`, in any case (% and _ are matched as themselves)."""
    return func.lower(column).contains(needle.lower(), autoescape=True)


def _identity_named(user_id: Any, needle: str) -> Any:
    return exists().where(Identity.user_id == user_id, _has(Identity.display_name, needle))


async def _person(session: AsyncSession, user: User) -> PersonView:
    identities = await session.scalars(
        select(Identity).where(Identity.user_id == user.id).order_by(Identity.created_at)
    )
    own = await session.scalars(select(Conversation.id).where(Conversation.user_id == user.id))
    return PersonView(
        id=user.id,
        display_name=user.display_name,
        timezone=user.timezone,
        created_at=user.created_at,
        identities=tuple(_identity_view(i) for i in identities),
        conversations=tuple(own),
        daily_tokens=user.daily_tokens,
    )


def _identity_view(row: Identity) -> IdentityView:
    return IdentityView(
        id=row.id,
        channel=row.channel,
        external_id=row.external_id,
        display_name=row.display_name,
        created_at=row.created_at,
    )
