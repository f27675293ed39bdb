"""Repository for the messages of conversations.

Callers get frozen views, never ORM rows, and every method is one short transaction.
Times are passed in by the caller so the gateway's clock is the only clock.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import CTE, Row, Select, Update, bindparam, func, literal, select, true, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.model_usage import Usage, total
from memory.storage.attachments import (
    PlatformFile,
    add_platform_files,
    media_line,
    take_uploads,
)
from memory.storage.engine import dialect_of, read, write_alone, write_transaction, writer_queue
from memory.storage.inserts import dialect_insert, skipping_insert
from memory.storage.leases import Held, LeaseLost, held_fence, lock_held, lock_params
from memory.storage.models import (
    Conversation,
    ConversationKind,
    Delivery,
    Message,
    Role,
    UsageKind,
)
from memory.storage.tables import CONVERSATIONS, IDENTITIES, MESSAGES, USAGE_DAYS
from memory.storage.usage_days import USAGE_COLUMNS, Payer, adding_cte, charge, charges


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
    # A model's reply: the model that wrote it, and the tokens its calls took.
    model: str | None = None
    usage_prompt: int | None = None
    usage_cached: int | None = None
    usage_completion: int | None = None
    # Its files, one line each as a model is told of them (None: it has none).
    media: str | None = None

    @property
    def sent_at(self) -> datetime:
        """When the person sent it, where the platform says; else when we received it."""
        return self.platform_ts or self.created_at


@dataclass(frozen=True, slots=True)
class PendingReply:
    """A reply still to send, the message it answers, and the chat it goes to."""

    reply: StoredMessage
    # None for a message sent unprompted (an operator's): it answers nothing.
    trigger: StoredMessage | None
    external_user_id: str  # the trigger's author (or the unprompted message's addressee)
    group_id: str | None  # the platform group, for a group conversation


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
    prompt_tokens: int | None = None
    model: str | None = None
    # A model's reply: what each of its calls took (stored summed on the reply, and
    # charged to `payer`'s day in the same transaction).
    usage: tuple[Usage, ...] = ()
    payer: Payer | None = None
    # Files the sender uploaded for this message (web chat): taken in its transaction.
    attachment_ids: tuple[int, ...] = ()
    # Files a platform holds for it: kept as fetching in its transaction, fetched after.
    platform_files: tuple[PlatformFile, ...] = ()


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
    Message.model,
    Message.usage_prompt,
    Message.usage_cached,
    Message.usage_completion,
    Message.media,
)


# A message by its platform's id, by our id, and the reply to a user's message: built
# once, as a statement's construction cost as much as its run (50-90 µs).
_BY_PLATFORM_ID = select(*MESSAGE_COLUMNS).where(
    Message.channel == bindparam("channel"),
    Message.platform_message_id == bindparam("platform_message_id"),
)
_BY_ID = select(*MESSAGE_COLUMNS).where(Message.id == bindparam("message_id"))
_REPLY_FOR = (
    select(*MESSAGE_COLUMNS)
    .where(
        Message.conversation_id == bindparam("conversation_id"),
        Message.reply_to_seq >= bindparam("seq"),
    )
    .order_by(Message.reply_to_seq, Message.seq)
    .limit(1)
)


def message_view(row: Any) -> StoredMessage:
    """A view of a row selected with `MESSAGE_COLUMNS` (or of a `Message`)."""
    if isinstance(row, Row):  # result rows, in the view's field order: the turn's hot path
        return StoredMessage(*row)
    return StoredMessage(*(getattr(row, column.key) for column in MESSAGE_COLUMNS))


class Messages:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        count_tokens: Callable[[str], int],
        writes: AbstractAsyncContextManager[Any] | None = None,
    ) -> None:
        """`count_tokens` gives the tokens a message's text takes in a prompt (stored
        with it, so prompt assembly never counts again); `writes` is held around each
        write (`writer_queue`, shared with the other busy write paths)."""
        self._sessions = sessions
        self._count_tokens = count_tokens
        self._writers = writes if writes is not None else writer_queue(sessions)

    async def add_message(
        self,
        conversation_id: uuid.UUID,
        new: NewMessage,
        *,
        now: datetime,
        held: Held | None = None,
    ) -> tuple[StoredMessage, bool]:
        """Store a message under the next seq; `(existing, False)` for a redelivery.

        A redelivery is found by the unique (channel, platform id) skipping the insert;
        rolling back returns the seq too, so the common case costs no extra query.
        With `held`, the message is stored only while that lease is still ours
        (`LeaseLost` otherwise): a turn that lost its conversation stores no reply.
        """
        tokens = self._count_tokens(new.text)
        if (
            new.platform_message_id is None
            and not new.attachment_ids
            and not new.platform_files
            and dialect_of(self._sessions) == "postgresql"
        ):
            # Nothing can skip its insert: one statement does it all (`_store_at_once`).
            async with self._writers:
                stored_now = await write_alone(
                    self._sessions,
                    lambda c: _store_at_once(c, conversation_id, new, tokens, now, held),
                )
            return stored_now, True

        # One transaction (seq, insert, redelivery): split, the seq could be reserved
        # by one statement and used by another's.
        def store(connection: Connection) -> StoredMessage | None:
            if held is not None:
                lock_held(connection, held, now)
            stored = store_message(connection, conversation_id, new, tokens, now)
            if stored is None:
                connection.rollback()  # the seq goes back
                return None
            if new.attachment_ids:
                # `UploadNotFound` leaves the transaction uncommitted: nothing stored.
                stored = _with_uploads(connection, stored, new)
            if new.platform_files:
                stored = _with_platform_files(connection, stored, new, now)
            if new.usage and new.payer is not None:
                charge(connection, new.payer, UsageKind.TURN, new.usage, now)
            return stored

        async with self._writers:
            stored = await write_transaction(self._sessions, store)
        if stored is not None:
            return stored, True
        existing = None
        if new.platform_message_id is not None:
            existing = await self.by_platform_id(new.channel, new.platform_message_id)
        if existing is None:
            # Only the platform id can clash, and only with a stored row: there is none,
            # so the conversation went, rows and all (on PostgreSQL this is how it shows).
            raise ConversationGone(conversation_id)
        return existing, False

    async def pass_over(
        self, conversation_id: uuid.UUID, upto: int, *, now: datetime, held: Held | None = None
    ) -> None:
        """Count the user messages up to seq `upto` as answered, with no reply (their
        day's tokens are spent and they were told so)."""
        async with self._writers, self._sessions() as session:
            if held is not None:
                await session.run_sync(lambda s: lock_held(s.connection(), held, now))
            await session.execute(
                update(Conversation)
                .where(Conversation.id == conversation_id, Conversation.answered_seq < upto)
                .values(answered_seq=upto)
            )
            await session.commit()

    async def by_platform_id(self, channel: str, platform_message_id: str) -> StoredMessage | None:
        keys = {"channel": channel, "platform_message_id": platform_message_id}
        row = await read(self._sessions, lambda c: c.execute(_BY_PLATFORM_ID, keys).one_or_none())
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
        keys = {"conversation_id": conversation_id, "seq": seq}
        row = await read(self._sessions, lambda c: c.execute(_REPLY_FOR, keys).one_or_none())
        return None if row is None else message_view(row)

    async def message_by_id(self, message_id: int) -> StoredMessage | None:
        """A message wherever it is now (linking moves messages between conversations)."""
        keys = {"message_id": message_id}
        row = await read(self._sessions, lambda c: c.execute(_BY_ID, keys).one_or_none())
        return None if row is None else message_view(row)

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

    async def pending_replies(
        self, *, after_id: int = 0, limit: int = 500, only: int | None = None
    ) -> list[PendingReply]:
        """Replies still to send, with where they go, a page at a time by id (one query
        a page: the sweep reads them every few seconds); `only`: that one message."""
        params = {"after_id": after_id, "page": limit, "only": only}
        query = _pending_page(only is not None)
        return await read(
            self._sessions, lambda c: [_pending(row) for row in c.execute(query, params)]
        )

    async def last_from(
        self, conversation_id: uuid.UUID, channel: str | None, *, not_on: str | None = None
    ) -> StoredMessage | None:
        """The newest message a person typed into the conversation (on `channel`; not
        on `not_on`)."""
        query = (
            select(*MESSAGE_COLUMNS)
            .where(
                Message.conversation_id == conversation_id,
                Message.role == Role.USER,
                Message.identity_id.is_not(None),
                Message.source.is_(None),
            )
            .order_by(Message.seq.desc())
            .limit(1)
        )
        if channel is not None:
            query = query.where(Message.channel == channel)
        if not_on is not None:
            query = query.where(Message.channel != not_on)
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
        return None if row is None else message_view(row)

    async def messages_before(
        self, conversation_id: uuid.UUID, before_seq: int, limit: int
    ) -> list[StoredMessage]:
        """The `limit` messages just before `before_seq`, oldest first."""
        query = (
            select(*MESSAGE_COLUMNS)
            .where(Message.conversation_id == conversation_id, Message.seq < before_seq)
            .order_by(Message.seq.desc())
            .limit(limit)
        )
        async with self._sessions() as session:
            return [message_view(row) for row in await session.execute(query)][::-1]

    async def failed_deliveries(self, *, after_id: int, limit: int) -> list[StoredMessage]:
        """Messages the platform would not take, after retries, a page at a time by id."""
        query = (
            select(*MESSAGE_COLUMNS)
            .where(Message.delivery == Delivery.FAILED, Message.id > after_id)
            .order_by(Message.id)
            .limit(limit)
        )
        async with self._sessions() as session:
            return [message_view(row) for row in await session.execute(query)]

    async def last_model(self, conversation_id: uuid.UUID) -> str | None:
        """The model that wrote the conversation's latest model reply, if any."""
        query = (
            select(Message.model)
            .where(Message.conversation_id == conversation_id, Message.model.is_not(None))
            .order_by(Message.seq.desc())
            .limit(1)
        )
        async with self._sessions() as session:
            return await session.scalar(query)


def _pending(row: Any) -> PendingReply:
    """A row of `pending_replies`: the reply's columns, the trigger's, then the chat's."""
    width = len(MESSAGE_COLUMNS)
    external_id, kind, group_id = row[2 * width :]
    trigger = row[width : 2 * width]
    return PendingReply(
        reply=StoredMessage(*row[:width]),
        trigger=None if trigger[0] is None else StoredMessage(*trigger),
        external_user_id=external_id or "",
        group_id=group_id if kind == ConversationKind.GROUP else None,
    )


def store_message(
    connection: Connection, conversation_id: uuid.UUID, new: NewMessage, tokens: int, now: datetime
) -> StoredMessage | None:
    """Store a message under the conversation's next seq, in `connection`'s transaction;
    None if its platform id is stored already (roll back: the seq was reserved).
    `ConversationGone` if the conversation is gone (erased while a turn ran)."""
    # The UPDATE takes the conversation's write lock first, so concurrent inserts into
    # one conversation get consecutive seqs without retries.
    is_user, answers = new.role is Role.USER, new.reply_to_seq is not None
    taking = {"conversation": conversation_id, "answered": new.reply_to_seq, "at": now}
    values = _row(conversation_id, new, tokens, now)
    dialect = connection.dialect.name
    if dialect == "postgresql":
        taking_and_storing = _seq_and_insert(is_user, answers, tuple(values))
        named = {f"new_{key}": value for key, value in values.items()}
        stored = connection.execute(taking_and_storing, {**taking, **named}).one_or_none()
        if stored is None and new.platform_message_id is None:
            raise ConversationGone(conversation_id)  # nothing else could skip the insert
    else:
        seq = connection.execute(_next_seq(is_user, answers), taking).scalar_one_or_none()
        if seq is None:
            raise ConversationGone(conversation_id)
        stored = connection.execute(_insert(dialect), {**values, "seq": seq}).one_or_none()
    return None if stored is None else StoredMessage(*stored)


class ConversationGone(LookupError):
    """The conversation a message was for is no longer there (erased meanwhile)."""

    def __init__(self, conversation_id: uuid.UUID) -> None:
        super().__init__(f"conversation {conversation_id} is gone")
        self.conversation_id = conversation_id


# Every message is stored through the two statements below, built once on the tables
# (`memory.storage.tables` says why); reads of whole messages select these.
MESSAGE_ROW = tuple(MESSAGES.c[column.key] for column in MESSAGE_COLUMNS)


@functools.cache
def _insert(dialect: str) -> Any:
    """Insert a message unless its platform id is stored (`_row`'s values)."""
    return skipping_insert(dialect, MESSAGES).returning(*MESSAGE_ROW)


@functools.cache
def _seq_and_insert(is_user: bool, answers: bool, keys: tuple[str, ...]) -> Any:
    """On PostgreSQL, `_next_seq` and `_insert` (of the columns `keys`) as one
    statement: one round trip where they took two, in the same transaction (so a
    skipped insert's rollback still gives the seq back). SQLite allows no UPDATE
    inside WITH."""
    taken = _next_seq(is_user, answers).cte("taken")
    return _insert_taken(taken, keys).on_conflict_do_nothing().add_cte(taken)


def _insert_taken(taken: CTE, keys: tuple[str, ...]) -> Any:
    """Insert a message (`new_…` values of the columns `keys`) under the seq `taken`
    returns; none if it returns none. A clash raises, unless the caller skips it."""
    columns = [MESSAGES.c.seq, *(MESSAGES.c[key] for key in keys)]
    # Named apart from the columns: an UPDATE takes a parameter named as one of its
    # table's columns for a value to set.
    values = select(
        taken.c.last_seq,
        *(bindparam(f"new_{column.key}", type_=column.type) for column in columns[1:]),
    )
    return (
        dialect_insert("postgresql", MESSAGES)
        # The columns left out have server defaults.
        .from_select(columns, values, include_defaults=False)
        .returning(*MESSAGE_ROW)
    )


def _store_at_once(
    connection: Connection,
    conversation_id: uuid.UUID,
    new: NewMessage,
    tokens: int,
    now: datetime,
    held: Held | None,
) -> StoredMessage:
    """On PostgreSQL, a message without a platform id stored as `add_message`'s
    transaction stores it, in one statement (`_stored_at_once`), atomic by itself: one
    round trip where BEGIN, the lease's lock, the seq and insert, the charge and COMMIT
    took five. With no platform id there is no redelivery to skip, so the insert skips
    nothing: a clash would raise and undo the whole statement, and no seq is ever taken
    for nothing."""
    is_user, answers = new.role is Role.USER, new.reply_to_seq is not None
    values = _row(conversation_id, new, tokens, now)
    rows = (
        []
        if not new.usage or new.payer is None
        else charges(new.payer, UsageKind.TURN, new.usage, now)
    )
    params: dict[str, Any] = {
        "conversation": conversation_id,
        "answered": new.reply_to_seq,
        "at": now,
    }
    params.update((f"new_{key}", value) for key, value in values.items())
    if held is not None:
        params.update(lock_params(held, now))
    for index, row in enumerate(rows):
        params.update((f"charge{index}_{key}", value) for key, value in row.items())
    statement = _stored_at_once(is_user, answers, tuple(values), held is not None, len(rows))
    stored = connection.execute(statement, params).one()
    if held is not None and not stored.held:
        raise LeaseLost(held.name)
    if stored.id is None:
        raise ConversationGone(conversation_id)
    return StoredMessage(*stored[1:])


@functools.cache
def _stored_at_once(
    is_user: bool, answers: bool, keys: tuple[str, ...], fenced: bool, charged: int
) -> Select[Any]:
    """`_store_at_once`'s statement: with `fenced`, the lease is locked first (`fence`)
    and the seq taken only if it is still ours; the message inserted under that seq
    (`stored`); the `charged` usage rows added only if it was (`charge0`, …). One row
    back, always: whether the lease held, and the message (all None if none)."""
    taking = _next_seq(is_user, answers)
    ours: Any = true()
    if fenced:
        ours = select(held_fence().c.name).exists()
        taking = taking.where(ours)
    taken = taking.cte("taken")
    stored = _insert_taken(taken, keys).cte("stored")
    ctes = [taken, stored]
    for index in range(charged):
        row = select(
            *(
                bindparam(f"charge{index}_{column}", type_=USAGE_DAYS.c[column].type)
                for column in USAGE_COLUMNS
            )
        ).where(select(stored.c.id).exists())
        ctes.append(adding_cte(f"charge{index}", row))
    one = select(literal(1).label("one")).subquery("one")
    return (
        select(ours.label("held"), *stored.c)
        .select_from(one.outerjoin(stored, true()))
        .add_cte(*ctes)
    )


@functools.cache
def _pending_page(only: bool) -> Select[Any]:
    """Replies still to send after id `after_id`, at most `page` (`only`: the one with
    id `only`), each with its trigger's columns and its chat's. Built once: the trigger's
    alias alone took milliseconds to build, and the sweep reads these every few
    seconds."""
    m, c, i = MESSAGES.c, CONVERSATIONS.c, IDENTITIES.c
    trigger = MESSAGES.alias("trigger")
    t = trigger.c
    chats = (
        MESSAGES.outerjoin(
            trigger, (t.conversation_id == m.conversation_id) & (t.seq == m.reply_to_seq)
        )
        .join(CONVERSATIONS, c.id == m.conversation_id)
        # A reply goes to its trigger's author; an unprompted message names its
        # addressee itself.
        .outerjoin(IDENTITIES, i.id == func.coalesce(t.identity_id, m.identity_id))
    )
    query = (
        select(*MESSAGE_ROW, *(t[column.key] for column in MESSAGE_COLUMNS))
        .add_columns(i.external_id, c.kind, c.group_id)
        .select_from(chats)
        .where(m.delivery == Delivery.PENDING, m.id > bindparam("after_id"))
        .order_by(m.id)
        .limit(bindparam("page"))
    )
    return query.where(m.id == bindparam("only")) if only else query


@functools.cache
def _next_seq(is_user: bool, answers: bool) -> Update:
    """Take the conversation's next seq (`conversation`, `answered`, `at`)."""
    c = CONVERSATIONS.c
    return (
        update(CONVERSATIONS)
        .where(c.id == bindparam("conversation"))
        .values(
            last_seq=c.last_seq + 1,
            last_user_seq=c.last_seq + 1 if is_user else c.last_user_seq,
            answered_seq=bindparam("answered") if answers else c.answered_seq,
            last_message_at=bindparam("at"),
        )
        .returning(c.last_seq)
    )


def _row(conversation_id: uuid.UUID, new: NewMessage, tokens: int, now: datetime) -> dict[str, Any]:
    """A new message's columns, all but its seq."""
    return {
        "conversation_id": conversation_id,
        "role": new.role,
        "channel": new.channel,
        "identity_id": new.identity_id,
        "author_name": new.author_name,
        "source": new.source,
        "text": new.text,
        "platform_message_id": new.platform_message_id,
        "platform_ts": new.platform_ts,
        "created_at": now,
        "token_count": tokens,
        "prompt_tokens": new.prompt_tokens,
        "model": new.model,
        **_usage_columns(new.usage),
        "reply_to_seq": new.reply_to_seq,
        "delivery": new.delivery,
        "delivery_attempts": 0,
    }


def _usage_columns(usage: tuple[Usage, ...]) -> dict[str, int | None]:
    if not usage:
        return {"usage_prompt": None, "usage_cached": None, "usage_completion": None}
    summed = total(usage)
    return {
        "usage_prompt": summed.prompt,
        "usage_cached": summed.cached,
        "usage_completion": summed.completion,
    }


def _with_platform_files(
    connection: Connection, stored: StoredMessage, new: NewMessage, now: datetime
) -> StoredMessage:
    """The message with the files a platform holds for it, told in its `media` as
    still being fetched."""
    media = add_platform_files(connection, stored.id, new.platform_files, now)
    media = f"{stored.media}\n{media}" if stored.media else media
    connection.execute(update(Message).where(Message.id == stored.id).values(media=media))
    return replace(stored, media=media)


def _with_uploads(connection: Connection, stored: StoredMessage, new: NewMessage) -> StoredMessage:
    """The message with the files its sender uploaded for it, told in its `media`."""
    taken = take_uploads(connection, new.identity_id, stored.id, new.attachment_ids)
    media = "\n".join(media_line(view) for view in taken)
    connection.execute(update(Message).where(Message.id == stored.id).values(media=media))
    return replace(stored, media=media)
