"""Repository for users, identities, conversations and messages.

Callers get frozen views, never ORM rows, and every method is one short transaction.
Times are passed in by the caller so the gateway's clock is the only clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.models import Conversation, ConversationKind, Delivery, Identity, Message, Role, User
from memory.tokens import TokenCounter, estimate_tokens, message_tokens


@dataclass(frozen=True, slots=True)
class IdentityRef:
    identity_id: uuid.UUID
    user_id: uuid.UUID
    conversation_id: uuid.UUID
    timezone: str


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    conversation_id: uuid.UUID
    seq: int
    role: Role
    channel: str
    text: str
    created_at: datetime
    platform_ts: datetime | None
    source: str | None
    author_name: str
    identity_id: uuid.UUID | None
    platform_message_id: str | None
    token_count: int
    reply_to_seq: int | None
    delivery: Delivery | None
    # Why the platform refused the reply (set when delivery failed or is being retried).
    delivery_error: str | None = None

    @property
    def sent_at(self) -> datetime:
        """When the person sent it, where the platform says; else when we received it."""
        return self.platform_ts or self.created_at


@dataclass(frozen=True, slots=True)
class NewMessage:
    role: Role
    channel: str
    text: str
    identity_id: uuid.UUID | None = None
    author_name: str = ""
    source: str | None = None
    platform_message_id: str | None = None
    platform_ts: datetime | None = None
    reply_to_seq: int | None = None
    delivery: Delivery | None = None


@dataclass(frozen=True, slots=True)
class ConversationView:
    id: uuid.UUID
    kind: ConversationKind
    user_id: uuid.UUID | None
    title: str
    created_at: datetime
    last_message_at: datetime | None
    message_count: int
    owes_reply: bool


@dataclass(frozen=True, slots=True)
class TurnState:
    """What a turn needs from storage, read in one go at its start."""

    conversation_id: uuid.UUID
    timezone: str
    group: bool
    live: tuple[StoredMessage, ...]
    # User messages after the last answered one, oldest first (never empty).
    unanswered: tuple[StoredMessage, ...]
    # When the message before this turn's new messages was sent (None: nothing before).
    previous_at: datetime | None


MESSAGE_COLUMNS = (
    Message.id,
    Message.conversation_id,
    Message.seq,
    Message.role,
    Message.channel,
    Message.text,
    Message.created_at,
    Message.platform_ts,
    Message.source,
    Message.author_name,
    Message.identity_id,
    Message.platform_message_id,
    Message.token_count,
    Message.reply_to_seq,
    Message.delivery,
    Message.delivery_error,
)


def message_view(row: Any) -> StoredMessage:
    """A view of a row selected with `MESSAGE_COLUMNS` (or of a `Message`)."""
    if isinstance(row, Row):  # result rows, in the view's field order: the turn's hot path
        return StoredMessage(*row)
    return StoredMessage(*(getattr(row, column.key) for column in MESSAGE_COLUMNS))


class Store:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        count_tokens: TokenCounter = estimate_tokens,
    ) -> None:
        self._sessions = sessions
        self._count_tokens = count_tokens

    # -- identities -------------------------------------------------------------------

    async def resolve_identity(
        self,
        channel: str,
        external_id: str,
        *,
        display_name: str,
        timezone: str,
        now: datetime,
    ) -> IdentityRef:
        """The identity's user and personal conversation, created on first contact."""
        found = await self._find_identity(channel, external_id)
        if found is not None:
            return found
        async with self._sessions() as session:
            user = User(display_name=display_name, timezone=timezone, created_at=now)
            session.add(user)
            await session.flush()
            identity = Identity(
                channel=channel,
                external_id=external_id,
                user_id=user.id,
                display_name=display_name,
                created_at=now,
            )
            conversation = Conversation(
                kind=ConversationKind.PERSONAL,
                user_id=user.id,
                title=display_name,
                created_at=now,
            )
            session.add_all([identity, conversation])
            try:
                await session.commit()
            except IntegrityError:
                # Two first messages raced; the other one created the identity.
                await session.rollback()
                found = await self._find_identity(channel, external_id)
                if found is None:
                    raise
                return found
            return IdentityRef(identity.id, user.id, conversation.id, timezone)

    async def _find_identity(self, channel: str, external_id: str) -> IdentityRef | None:
        query = (
            select(Identity.id, Identity.user_id, Conversation.id, User.timezone)
            .join(User, User.id == Identity.user_id)
            .join(Conversation, Conversation.user_id == User.id)
            .where(Identity.channel == channel, Identity.external_id == external_id)
        )
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
        return None if row is None else IdentityRef(row[0], row[1], row[2], row[3])

    # -- messages ---------------------------------------------------------------------

    async def add_message(
        self, conversation_id: uuid.UUID, new: NewMessage, *, now: datetime
    ) -> tuple[StoredMessage, bool]:
        """Store a message under the next seq; `(existing, False)` for a redelivery.

        A redelivery is found by the unique (channel, platform id) refusing the insert,
        which rolls the seq back too: the common case costs no extra query.
        """
        is_user = new.role is Role.USER
        async with self._sessions() as session:
            # The UPDATE takes the conversation's write lock first, so concurrent
            # inserts into one conversation get consecutive seqs without retries.
            seq = (
                await session.execute(
                    update(Conversation)
                    .where(Conversation.id == conversation_id)
                    .values(
                        last_seq=Conversation.last_seq + 1,
                        last_user_seq=(
                            Conversation.last_seq + 1 if is_user else Conversation.last_user_seq
                        ),
                        answered_seq=(
                            Conversation.answered_seq
                            if new.reply_to_seq is None
                            else new.reply_to_seq
                        ),
                        last_message_at=now,
                    )
                    .returning(Conversation.last_seq)
                )
            ).scalar_one()
            message = Message(
                conversation_id=conversation_id,
                seq=seq,
                role=new.role,
                channel=new.channel,
                identity_id=new.identity_id,
                author_name=new.author_name,
                source=new.source,
                text=new.text,
                platform_message_id=new.platform_message_id,
                platform_ts=new.platform_ts,
                created_at=now,
                token_count=message_tokens(new.text, self._count_tokens),
                reply_to_seq=new.reply_to_seq,
                delivery=new.delivery,
                delivery_attempts=0,
            )
            session.add(message)
            try:
                await session.commit()
            except IntegrityError:
                await session.rollback()
                if new.platform_message_id is None:
                    raise
                existing = await self.by_platform_id(new.channel, new.platform_message_id)
                if existing is None:
                    raise
                return existing, False
            return message_view(message), True

    async def by_platform_id(self, channel: str, platform_message_id: str) -> StoredMessage | None:
        query = select(*MESSAGE_COLUMNS).where(
            Message.channel == channel, Message.platform_message_id == platform_message_id
        )
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
        return None if row is None else message_view(row)

    async def messages_after(
        self, conversation_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[StoredMessage]:
        query = (
            select(*MESSAGE_COLUMNS)
            .where(Message.conversation_id == conversation_id, Message.seq > after_seq)
            .order_by(Message.seq)
            .limit(limit)
        )
        async with self._sessions() as session:
            return [message_view(row) for row in await session.execute(query)]

    async def reply_for(self, conversation_id: uuid.UUID, seq: int) -> StoredMessage | None:
        """The message of the turn that answered user message `seq`, if any yet."""
        query = (
            select(*MESSAGE_COLUMNS)
            .where(Message.conversation_id == conversation_id, Message.reply_to_seq >= seq)
            .order_by(Message.reply_to_seq, Message.seq)
            .limit(1)
        )
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
        return None if row is None else message_view(row)

    async def message_at(self, conversation_id: uuid.UUID, seq: int) -> StoredMessage | None:
        query = select(*MESSAGE_COLUMNS).where(
            Message.conversation_id == conversation_id, Message.seq == seq
        )
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
        return None if row is None else message_view(row)

    async def message_by_id(self, message_id: int) -> StoredMessage | None:
        """A message wherever it is now (linking moves messages between conversations)."""
        query = select(*MESSAGE_COLUMNS).where(Message.id == message_id)
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
        return None if row is None else message_view(row)

    async def external_id(self, identity_id: uuid.UUID | None) -> str:
        """The platform address of an identity ('' when there is none)."""
        if identity_id is None:
            return ""
        async with self._sessions() as session:
            found = await session.scalar(
                select(Identity.external_id).where(Identity.id == identity_id)
            )
        return found or ""

    async def personal_owner(self, conversation_id: uuid.UUID) -> uuid.UUID | None:
        """The person whose own conversation this is; None for a group."""
        async with self._sessions() as session:
            return await session.scalar(
                select(Conversation.user_id).where(
                    Conversation.id == conversation_id,
                    Conversation.kind == ConversationKind.PERSONAL,
                )
            )

    async def messages_between(
        self, conversation_id: uuid.UUID, first_seq: int, last_seq: int
    ) -> list[StoredMessage]:
        query = (
            select(*MESSAGE_COLUMNS)
            .where(
                Message.conversation_id == conversation_id,
                Message.seq.between(first_seq, last_seq),
            )
            .order_by(Message.seq)
        )
        async with self._sessions() as session:
            return [message_view(row) for row in await session.execute(query)]

    async def last_channel(self, conversation_id: uuid.UUID) -> str:
        """The channel the conversation was last written on."""
        async with self._sessions() as session:
            found = await session.scalar(
                select(Message.channel)
                .where(Message.conversation_id == conversation_id)
                .order_by(Message.seq.desc())
                .limit(1)
            )
        return found or "webchat"

    async def pending_deliveries(self, limit: int = 500) -> list[StoredMessage]:
        query = (
            select(*MESSAGE_COLUMNS)
            .where(Message.delivery == Delivery.PENDING)
            .order_by(Message.id)
            .limit(limit)
        )
        async with self._sessions() as session:
            return [message_view(row) for row in await session.execute(query)]

    # -- turns ------------------------------------------------------------------------

    async def owes_reply(self, conversation_id: uuid.UUID) -> bool:
        """Whether a user message of the conversation is still unanswered."""
        async with self._sessions() as session:
            found = await session.scalar(
                select(Conversation.id).where(
                    Conversation.id == conversation_id,
                    Conversation.last_user_seq > Conversation.answered_seq,
                )
            )
        return found is not None

    async def conversations_owing_reply(self) -> list[uuid.UUID]:
        query = select(Conversation.id).where(
            Conversation.last_user_seq > Conversation.answered_seq
        )
        async with self._sessions() as session:
            return list((await session.scalars(query)).all())

    async def load_turn(self, conversation_id: uuid.UUID) -> TurnState | None:
        """The live window, what the turn answers (every user message after the last
        answered one) and when the message before those was sent; None if nothing is
        unanswered."""
        async with self._sessions() as session:
            answered, last_user, kind, timezone = (
                await session.execute(
                    select(
                        Conversation.answered_seq,
                        Conversation.last_user_seq,
                        Conversation.kind,
                        User.timezone,
                    )
                    .outerjoin(User, User.id == Conversation.user_id)
                    .where(Conversation.id == conversation_id)
                )
            ).one()
            if last_user <= answered:
                return None
            rows = await session.execute(
                select(*MESSAGE_COLUMNS)
                .where(Message.conversation_id == conversation_id, Message.chunk_id.is_(None))
                .order_by(Message.seq)
            )
            live = tuple(message_view(row) for row in rows)
            unanswered = [m for m in live if m.role is Role.USER and m.seq > answered]
            if not unanswered:
                return None
            first_new = unanswered[0]
            earlier = [m for m in live if m.seq < first_new.seq]
            previous_at = earlier[-1].sent_at if earlier else None
            if previous_at is None and first_new.seq > 1:
                # Everything before this turn is archived: ask the archive's edge.
                previous_at = await session.scalar(
                    select(Message.created_at)
                    .where(Message.conversation_id == conversation_id, Message.seq < first_new.seq)
                    .order_by(Message.seq.desc())
                    .limit(1)
                )
        return TurnState(
            conversation_id=conversation_id,
            timezone=timezone or "UTC",
            group=kind == ConversationKind.GROUP,
            live=live,
            unanswered=tuple(unanswered),
            previous_at=previous_at,
        )

    # -- conversations ----------------------------------------------------------------

    async def list_conversations(
        self, *, limit: int, offset: int, user_id: uuid.UUID | None = None
    ) -> Sequence[ConversationView]:
        query = select(Conversation).order_by(
            Conversation.last_message_at.desc().nulls_last(), Conversation.id
        )
        if user_id is not None:
            query = query.where(Conversation.user_id == user_id)
        async with self._sessions() as session:
            rows = (await session.scalars(query.limit(limit).offset(offset))).all()
        return [_conversation_view(row) for row in rows]

    async def get_conversation(self, conversation_id: uuid.UUID) -> ConversationView | None:
        async with self._sessions() as session:
            row = await session.get(Conversation, conversation_id)
        return None if row is None else _conversation_view(row)


def _conversation_view(row: Conversation) -> ConversationView:
    return ConversationView(
        id=row.id,
        kind=row.kind,
        user_id=row.user_id,
        title=row.title,
        created_at=row.created_at,
        last_message_at=row.last_message_at,
        message_count=row.last_seq,
        owes_reply=row.last_user_seq > row.answered_seq,
    )
