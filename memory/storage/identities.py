"""Repository for identities: a platform address, its person and their conversation."""

from __future__ import annotations

import functools
import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Select, bindparam, func, insert, literal, literal_column, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.conversations import personal_conversation
from memory.storage.engine import dialect_of, read, write_alone, write_transaction, writer_queue
from memory.storage.inserts import skipping_insert
from memory.storage.models import Conversation, ConversationKind, Identity, User
from memory.storage.tables import CONVERSATIONS, IDENTITIES, USERS


@dataclass(frozen=True, slots=True)
class IdentityRef:
    identity_id: uuid.UUID
    user_id: uuid.UUID
    conversation_id: uuid.UUID
    timezone: str
    # The identity's label: the name the platform (or the site) gave when it was last
    # told, not necessarily the person's (User.display_name).
    display_name: str = ""


# Every platform message resolves its sender: built once (`memory.storage.tables`).
_FIND_IDENTITY = (
    select(
        IDENTITIES.c.id,
        IDENTITIES.c.user_id,
        CONVERSATIONS.c.id,
        USERS.c.timezone,
        IDENTITIES.c.display_name,
    )
    .join(USERS, USERS.c.id == IDENTITIES.c.user_id)
    .join(CONVERSATIONS, CONVERSATIONS.c.user_id == USERS.c.id)
    .where(
        IDENTITIES.c.channel == bindparam("channel"),
        IDENTITIES.c.external_id == bindparam("external_id"),
    )
)
_EXTERNAL_ID = select(IDENTITIES.c.external_id).where(IDENTITIES.c.id == bindparam("identity_id"))
_NEW_USER = insert(USERS)
_NEW_CONVERSATION = insert(CONVERSATIONS)


@functools.cache
def _new_identity(dialect: str) -> Any:
    return skipping_insert(dialect, IDENTITIES).returning(IDENTITIES.c.id)


@dataclass(frozen=True, slots=True)
class _FirstContact:
    """A sender seen for the first time: their person, identity and own conversation,
    in one transaction of statements built once (an ORM session and statements built
    each time made a first contact cost ten times a known sender's lookup)."""

    channel: str
    external_id: str
    display_name: str
    timezone: str
    now: datetime

    def create(self, connection: Connection) -> IdentityRef | None:
        """The new identity; None (nothing written) if another message created it."""
        user_id, conversation_id = uuid.uuid4(), uuid.uuid4()
        connection.execute(
            _NEW_USER,
            {
                "id": user_id,
                "display_name": self.display_name,
                "timezone": self.timezone,
                "created_at": self.now,
            },
        )
        identity_id = connection.scalar(
            _new_identity(connection.dialect.name),
            {
                "id": uuid.uuid4(),
                "channel": self.channel,
                "external_id": self.external_id,
                "user_id": user_id,
                "display_name": self.display_name,
                "created_at": self.now,
            },
        )
        if identity_id is None:
            connection.rollback()
            return None
        connection.execute(
            _NEW_CONVERSATION,
            {
                "id": conversation_id,
                "kind": ConversationKind.PERSONAL,
                "user_id": user_id,
                "title": self.display_name,
                "created_at": self.now,
            },
        )
        return IdentityRef(identity_id, user_id, conversation_id, self.timezone, self.display_name)

    def create_at_once(self, connection: Connection) -> IdentityRef | None:
        """`create` on PostgreSQL, in one statement (`_first_contact_at_once`), atomic by
        itself: one round trip where BEGIN, three inserts and COMMIT took five."""
        identity_id, user_id, conversation_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        created = connection.execute(
            _first_contact_at_once(),
            {
                "i_id": identity_id,
                "i_channel": self.channel,
                "i_external_id": self.external_id,
                "i_name": self.display_name,
                "i_at": self.now,
                "u_id": user_id,
                "u_name": self.display_name,
                "u_timezone": self.timezone,
                "u_at": self.now,
                "c_id": conversation_id,
                "c_title": self.display_name,
                "c_at": self.now,
            },
        ).scalar_one_or_none()
        if created is None:
            return None
        return IdentityRef(identity_id, user_id, conversation_id, self.timezone, self.display_name)


# A conversation's seq bookkeeping, which has no default on the server.
_SEQS = ("last_seq", "last_user_seq", "answered_seq")


@functools.cache
def _first_contact_at_once() -> Select[Any]:
    """A first contact's three inserts as one statement: the identity first, skipped if
    another message created it meanwhile, then its person and conversation only if it
    was not (each `INSERT … SELECT` from the identity's row; the identity's reference
    to its person is checked at the statement's end, when both are there). Returns the
    identity's id, or no row."""
    identity = (
        postgresql.insert(IDENTITIES)
        .values(
            id=bindparam("i_id"),
            channel=bindparam("i_channel"),
            external_id=bindparam("i_external_id"),
            user_id=bindparam("u_id"),
            display_name=bindparam("i_name"),
            created_at=bindparam("i_at"),
            # Written out: a statement's columns' defaults are not filled in its CTEs.
            seen_seq=literal_column("0"),
        )
        .on_conflict_do_nothing()
        .returning(IDENTITIES.c.id, IDENTITIES.c.user_id)
        .cte("identity")
    )
    person = insert(USERS).from_select(
        ["id", "display_name", "timezone", "created_at"],
        select(
            identity.c.user_id,
            bindparam("u_name", type_=USERS.c.display_name.type),
            bindparam("u_timezone", type_=USERS.c.timezone.type),
            bindparam("u_at", type_=USERS.c.created_at.type),
        ),
        include_defaults=False,  # the server's, for the rest
    )
    conversation = insert(CONVERSATIONS).from_select(
        ["id", "kind", "user_id", "title", "created_at", *_SEQS],
        select(
            bindparam("c_id", type_=CONVERSATIONS.c.id.type),
            literal(ConversationKind.PERSONAL, CONVERSATIONS.c.kind.type),
            identity.c.user_id,
            bindparam("c_title", type_=CONVERSATIONS.c.title.type),
            bindparam("c_at", type_=CONVERSATIONS.c.created_at.type),
            *(literal_column("0") for _ in _SEQS),
        ),
        include_defaults=False,
    )
    return (
        select(identity.c.id)
        .add_cte(person.cte("person"))
        .add_cte(conversation.cte("conversation"))
    )


class UnlinkStatus(StrEnum):
    UNLINKED = "unlinked"
    ONLY_IDENTITY = "only identity"


class Identities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        writes: AbstractAsyncContextManager[Any] | None = None,
    ) -> None:
        """`writes`: held around a first contact's write (`writer_queue`, shared with
        the other busy write paths)."""
        self._sessions = sessions
        self._writes = writes if writes is not None else writer_queue(sessions)

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
        first = _FirstContact(channel, external_id, display_name, timezone, now)
        async with self._writes:
            if dialect_of(self._sessions) == "postgresql":
                created = await write_alone(self._sessions, first.create_at_once)
            else:
                created = await write_transaction(self._sessions, first.create)
        if created is not None:
            return created
        # Two first messages raced; the other one created the identity.
        found = await self._find_identity(channel, external_id)
        if found is None:
            raise LookupError(f"identity {channel}:{external_id} vanished")
        return found

    async def relabel(self, identity_id: uuid.UUID, display_name: str) -> None:
        """The identity is now called `display_name`; so are its person and their own
        conversation where they went by its old label (a name an operator or another
        channel gave them stays)."""
        async with self._sessions() as session:
            identity = await session.get(Identity, identity_id)
            if identity is None or identity.display_name == display_name:
                return
            old, identity.display_name = identity.display_name, display_name
            await session.execute(
                update(User)
                .where(User.id == identity.user_id, User.display_name == old)
                .values(display_name=display_name)
            )
            await session.execute(
                update(Conversation)
                .where(
                    Conversation.user_id == identity.user_id,
                    Conversation.kind == ConversationKind.PERSONAL,
                    Conversation.title == old,
                )
                .values(title=display_name)
            )
            await session.commit()

    async def _find_identity(self, channel: str, external_id: str) -> IdentityRef | None:
        params = {"channel": channel, "external_id": external_id}
        row = await read(self._sessions, lambda c: c.execute(_FIND_IDENTITY, params).one_or_none())
        return None if row is None else IdentityRef(*row)

    async def seen_seq(self, identity_id: uuid.UUID) -> int:
        """How far the identity has read its conversation (0: nothing yet)."""
        async with self._sessions() as session:
            seen = await session.scalar(select(Identity.seen_seq).where(Identity.id == identity_id))
        return seen or 0

    async def mark_seen(self, identity_id: uuid.UUID, seq: int) -> None:
        """The identity has read up to `seq`; never moves back (devices race)."""
        async with self._sessions() as session:
            await session.execute(
                update(Identity)
                .where(Identity.id == identity_id, Identity.seen_seq < seq)
                .values(seen_seq=seq)
            )
            await session.commit()

    async def external_id(self, identity_id: uuid.UUID | None) -> str:
        """The platform address of an identity ('' when there is none)."""
        if identity_id is None:
            return ""
        params = {"identity_id": identity_id}
        return await read(self._sessions, lambda c: c.scalar(_EXTERNAL_ID, params)) or ""

    async def unlink(self, identity_id: uuid.UUID, *, now: datetime) -> UnlinkStatus:
        """Give the identity a person and a conversation of its own again.

        The history stays where it is (with the person's other channels)."""
        async with self._sessions() as session:
            identity = await session.get(Identity, identity_id)
            if identity is None:
                raise LookupError(f"no identity {identity_id}")
            siblings = await session.scalar(
                select(func.count())
                .select_from(Identity)
                .where(Identity.user_id == identity.user_id)
            )
            if (siblings or 0) <= 1:
                return UnlinkStatus.ONLY_IDENTITY
            old_user = await session.get(User, identity.user_id)
            assert old_user is not None
            user = User(
                display_name=identity.display_name, timezone=old_user.timezone, created_at=now
            )
            session.add(user)
            await session.flush()
            session.add(personal_conversation(user.id, identity.display_name, now))
            identity.user_id = user.id
            identity.seen_seq = 0  # a new conversation, numbered from 1
            await session.commit()
            return UnlinkStatus.UNLINKED
