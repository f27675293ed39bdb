"""Repository for the delivery state of replies: parts sent, failures, receipts.

A reply split into parts records each part the platform took in the same transaction
that advances `delivery_parts_sent`, so a retry after a 429 or a crash resumes with the
first part not yet sent and never repeats one. Receipts (WhatsApp statuses) find the
reply through the platform id of the part they are about.
"""

from __future__ import annotations

import functools
import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Update, bindparam, delete, func, null, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.dml import ReturningUpdate

from memory.storage.engine import (
    dialect_of,
    read,
    write_alone,
    write_transaction,
    writer_queue,
)
from memory.storage.inserts import dialect_insert
from memory.storage.models import (
    ConversationKind,
    Delivery,
    Message,
    SentPart,
)
from memory.storage.tables import CONVERSATIONS, IDENTITIES, MESSAGES, SENT_PARTS, STREAM_PREVIEWS

# Receipts only ever move a part forward; they arrive in any order.
_RANK = {Delivery.SENT: 1, Delivery.DELIVERED: 2, Delivery.READ: 3}

# Every part delivered takes these: built once (`memory.storage.tables`).
_ADDRESS = (
    select(IDENTITIES.c.external_id, CONVERSATIONS.c.kind, CONVERSATIONS.c.group_id)
    .select_from(CONVERSATIONS)
    .outerjoin(IDENTITIES, IDENTITIES.c.id == bindparam("identity_id"))
    .where(CONVERSATIONS.c.id == bindparam("conversation_id"))
)
_STATE_COLUMNS = (
    MESSAGES.c.delivery,
    MESSAGES.c.delivery_parts_sent,
    MESSAGES.c.delivery_attempts,
    MESSAGES.c.delivery_sending_part,
)
# The preview that showed a reply in `chat` while it was written.
_PREVIEW = (
    select(STREAM_PREVIEWS.c.platform_message_id)
    .where(
        STREAM_PREVIEWS.c.conversation_id == MESSAGES.c.conversation_id,
        STREAM_PREVIEWS.c.trigger_seq == MESSAGES.c.reply_to_seq,
        STREAM_PREVIEWS.c.channel == MESSAGES.c.channel,
        STREAM_PREVIEWS.c.chat == bindparam("chat"),
    )
    .limit(1)
    .scalar_subquery()
)
_STATE = select(*_STATE_COLUMNS, null().label("preview")).where(
    MESSAGES.c.id == bindparam("message_id")
)
_STATE_AND_PREVIEW = select(*_STATE_COLUMNS, _PREVIEW.label("preview")).where(
    MESSAGES.c.id == bindparam("message_id")
)
# Only the part next in line of a reply still pending, with no part in doubt.
_SENDING = (
    update(MESSAGES)
    .where(
        MESSAGES.c.id == bindparam("message_id"),
        MESSAGES.c.delivery == Delivery.PENDING,
        MESSAGES.c.delivery_parts_sent == bindparam("part"),
        # None in doubt: a mark of this part not cleared. (One of another part is stale.)
        MESSAGES.c.delivery_sending_part.is_distinct_from(bindparam("part")),
    )
    .values(delivery_sending_part=bindparam("part"))
)
_PREVIEW_DONE = delete(STREAM_PREVIEWS).where(
    STREAM_PREVIEWS.c.channel == bindparam("channel"),
    STREAM_PREVIEWS.c.platform_message_id == bindparam("preview"),
)

# The reply's every part went out, if it was still pending: where it stands.
_SENT = (
    update(MESSAGES)
    .where(MESSAGES.c.id == bindparam("message_id"), MESSAGES.c.delivery == Delivery.PENDING)
    .values(delivery=Delivery.SENT, delivery_attempts=MESSAGES.c.delivery_attempts + 1)
    .returning(MESSAGES.c.id, MESSAGES.c.conversation_id, MESSAGES.c.seq)
)


@functools.cache
def _counted(last: bool) -> ReturningUpdate[int, uuid.UUID, int]:
    """A part the platform took, counted: only as the part this sender marked, next in
    line of a reply still pending. A sender that stalled while another went on (its
    lane's lease lost mid-send, its mark settled as in doubt) counts nothing: its late
    record would take the reply back to a part already past, or clear a later part's
    mark. With `last`, the reply is sent, in the same statement."""
    values: dict[str, Any] = {
        "delivery_parts_sent": bindparam("parts_sent"),
        "delivery_sending_part": None,
    }
    if last:
        values["delivery"] = Delivery.SENT
        values["delivery_attempts"] = MESSAGES.c.delivery_attempts + 1
    return (
        update(MESSAGES)
        .where(
            MESSAGES.c.id == bindparam("message_id"),
            MESSAGES.c.delivery == Delivery.PENDING,
            MESSAGES.c.delivery_parts_sent == bindparam("part"),
            MESSAGES.c.delivery_sending_part == bindparam("part"),
        )
        .values(values)
        .returning(MESSAGES.c.id, MESSAGES.c.conversation_id, MESSAGES.c.seq)
    )


@functools.cache
def _part_recorded(dialect: str) -> Any:
    """The part the platform took, kept for its receipts: once (a resend after a crash
    is not kept again), and only while its reply exists (one erased while the part was
    on its way has nothing to keep it for)."""
    columns = SENT_PARTS.c
    sent = select(
        MESSAGES.c.id,
        bindparam("part", type_=columns.part.type),
        bindparam("part_channel", type_=columns.channel.type),
        bindparam("part_platform_id", type_=columns.platform_message_id.type),
        bindparam("part_status", type_=columns.status.type),
        bindparam("part_at", type_=columns.updated_at.type),
    ).where(MESSAGES.c.id == bindparam("message_id"))
    names = ["message_id", "part", "channel", "platform_message_id", "status", "updated_at"]
    return dialect_insert(dialect, SENT_PARTS).from_select(names, sent).on_conflict_do_nothing()


@functools.cache
def _part_sent_statement(inserts: bool, last: bool, preview: bool) -> Any:
    """`Deliveries.part_sent` on PostgreSQL: one statement, atomic by itself, where the
    transaction takes four or five round trips (BEGIN, the sent part, the count,
    COMMIT). The sent part and the preview's end are CTEs, which run whether or not the
    part is counted. (A bound value may not share a name with a column of the table
    updated: `part_…`.)"""
    statement: Any = _counted(last)
    if inserts:
        statement = statement.add_cte(_part_recorded("postgresql").cte("part"))
    if preview:
        done = delete(STREAM_PREVIEWS).where(
            STREAM_PREVIEWS.c.channel == bindparam("part_channel"),
            STREAM_PREVIEWS.c.platform_message_id == bindparam("preview"),
        )
        statement = statement.add_cte(done.cte("preview"))
    return statement


class NotPending(LookupError):
    """A reply is not where a send of one of its parts needs it to be."""

    def __init__(self, message_id: int, part: int) -> None:
        super().__init__(f"reply {message_id} is not pending from part {part}")
        self.message_id = message_id
        self.part = part


@dataclass(frozen=True, slots=True)
class DeliveryState:
    message_id: int
    delivery: Delivery | None
    parts_sent: int
    attempts: int
    # A part whose send call was in flight when the process stopped: the platform may
    # or may not have taken it.
    uncertain_part: int | None = None
    # The platform id of a message that showed this reply while it was written, to be
    # edited into its first part.
    preview: str | None = None


@dataclass(frozen=True, slots=True)
class DeliveryMoved:
    """A reply whose delivery just changed, and where it stands in its conversation:
    what whoever shows it needs to read it again."""

    message_id: int
    conversation_id: uuid.UUID
    seq: int


class Deliveries:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        writes: AbstractAsyncContextManager[Any] | None = None,
    ) -> None:
        """`writes`: held around each write (`writer_queue`, shared with the other
        busy write paths)."""
        self._sessions = sessions
        self._writes = writes if writes is not None else writer_queue(sessions)

    async def address(
        self, conversation_id: uuid.UUID, identity_id: uuid.UUID | None
    ) -> tuple[str, str | None]:
        """Where an answer goes, in one read: the platform address of the identity ('' if
        none) and the conversation's platform group id (None unless a group)."""
        params = {"conversation_id": conversation_id, "identity_id": identity_id}
        row = await read(self._sessions, lambda c: c.execute(_ADDRESS, params).one_or_none())
        if row is None:
            return "", None
        group = row.group_id if row.kind == ConversationKind.GROUP else None
        return row.external_id or "", group

    async def state(
        self, message_id: int, *, preview_in: str | None = None
    ) -> DeliveryState | None:
        """Where a reply's delivery stands; with `preview_in` (a chat), also the preview
        that showed it there while it was written, if one did."""
        params: dict[str, object]
        if preview_in is None:
            query, params = _STATE, {"message_id": message_id}
        else:
            query, params = _STATE_AND_PREVIEW, {"message_id": message_id, "chat": preview_in}
        row = await read(self._sessions, lambda c: c.execute(query, params).one_or_none())
        if row is None:
            return None
        delivery = row.delivery
        sending = row.delivery_sending_part
        return DeliveryState(
            message_id,
            delivery,
            row.delivery_parts_sent,
            row.delivery_attempts,
            uncertain_part=sending if sending == row.delivery_parts_sent else None,
            preview=row.preview,
        )

    async def sending(self, message_id: int, part: int) -> None:
        """A send call for `part` is about to go out (cleared once its answer is in).
        `NotPending` (nothing marked) unless the reply is pending, every part before
        `part` sent, none after it, and none in doubt: it was sent, failed, deleted or
        went on meanwhile, and is not to be sent from here."""
        params = {"message_id": message_id, "part": part}
        async with self._writes:
            marked = await write_alone(
                self._sessions, lambda c: c.execute(_SENDING, params).rowcount
            )
        if marked != 1:
            raise NotPending(message_id, part)

    async def uncertain(self, message_id: int, part: int, *, skip: bool) -> None:
        """Count `part` as uncertain; with `skip`, treat it as sent and go on after it."""
        values: dict[str, object] = {
            "delivery_sending_part": None,
            "delivery_uncertain": Message.delivery_uncertain + 1,
        }
        if skip:
            values["delivery_parts_sent"] = part + 1
        await self._update(message_id, **values)

    async def uncertain_parts(self, conversation_id: uuid.UUID | None = None) -> int:
        """Parts in doubt in a conversation, or (None) everywhere."""
        query = select(func.coalesce(func.sum(Message.delivery_uncertain), 0)).where(
            Message.delivery_uncertain > 0
        )
        if conversation_id is not None:
            query = query.where(Message.conversation_id == conversation_id)
        async with self._sessions() as session:
            total = await session.scalar(query)
        return int(total or 0)

    async def _update(self, message_id: int, **values: object) -> None:
        change = update(Message).where(Message.id == message_id).values(values)
        async with self._writes:
            await write_alone(self._sessions, lambda c: c.execute(change))

    async def part_sent(
        self,
        message_id: int,
        part: int,
        channel: str,
        platform_id: str | None,
        *,
        now: datetime,
        last: bool = False,
        preview: str | None = None,
    ) -> DeliveryMoved | None:
        """The platform took `part`, marked by `sending`: recorded, and counted (with
        `last`, the reply is sent too, and this is where it moved; else None).
        `NotPending` if it is recorded but not counted: the reply went on without this
        sender (another settled its mark, sent, failed or erased it meanwhile).
        `preview`: the part was edited into that preview message, done with now."""
        counted: Any
        params = {
            "message_id": message_id,
            "parts_sent": part + 1,
            "part": part,
            "part_channel": channel,
            "part_platform_id": platform_id,
            "part_status": Delivery.SENT,
            "part_at": now,
            "preview": preview,
        }
        if dialect_of(self._sessions) == "postgresql":
            statement = _part_sent_statement(platform_id is not None, last, preview is not None)
            async with self._writes:
                counted = await write_alone(
                    self._sessions, lambda c: c.execute(statement, params).one_or_none()
                )
        else:

            def record(connection: Connection) -> Any:
                if preview is not None:
                    connection.execute(_PREVIEW_DONE, {"channel": channel, "preview": preview})
                if platform_id is not None:
                    connection.execute(_part_recorded(connection.dialect.name), params)
                return connection.execute(_counted(last), params).one_or_none()

            async with self._writes:
                counted = await write_transaction(self._sessions, record)
        if counted is None:
            raise NotPending(message_id, part)
        return DeliveryMoved(counted.id, counted.conversation_id, counted.seq) if last else None

    async def sent(self, message_id: int) -> DeliveryMoved | None:
        """Every part went out; None if the reply was no longer pending (receipts that
        came first are not undone) or is gone."""
        return await self._move(_SENT, {"message_id": message_id})

    async def attempt_failed(
        self, message_id: int, error: str, *, final: bool
    ) -> DeliveryMoved | None:
        """A send the platform refused (`final`: the reply failed for good); None if the
        reply is gone."""
        values: dict[str, object] = {
            "delivery_error": error,
            "delivery_attempts": Message.delivery_attempts + 1,
            # The platform answered: the part is known not to be sent.
            "delivery_sending_part": None,
        }
        if final:
            values["delivery"] = Delivery.FAILED
        return await self._move(
            _returning(update(Message).where(Message.id == message_id).values(values))
        )

    async def send_again(self, message_id: int) -> DeliveryMoved | None:
        """Make a failed delivery pending again, from its first unsent part; None if the
        message is not a failed delivery."""
        return await self._move(
            _returning(
                update(Message)
                .where(Message.id == message_id, Message.delivery == Delivery.FAILED)
                .values(delivery=Delivery.PENDING, delivery_attempts=0, delivery_error=None)
            )
        )

    async def _move(
        self, change: ReturningUpdate[int, uuid.UUID, int], params: dict[str, Any] | None = None
    ) -> DeliveryMoved | None:
        """Apply `change` to one reply and say where that reply is, in the same
        statement (RETURNING id, conversation_id, seq): announcing a delivery costs no
        read of its own."""
        async with self._writes:
            row = await write_alone(
                self._sessions, lambda c: c.execute(change, params).one_or_none()
            )
        return None if row is None else DeliveryMoved(row.id, row.conversation_id, row.seq)

    async def receipt(
        self,
        channel: str,
        platform_id: str,
        status: Delivery,
        error: str | None,
        *,
        now: datetime,
    ) -> bool:
        """Apply a platform's report about a part we sent; False if it is not ours."""
        async with self._sessions() as session:
            part = await session.scalar(
                select(SentPart).where(
                    SentPart.channel == channel, SentPart.platform_message_id == platform_id
                )
            )
            if part is None:
                return False
            if not _moves_forward(part.status, status):
                return True
            part.status = status
            part.error = error
            part.updated_at = now
            await session.flush()
            await _settle(session, part.message_id)
            await session.commit()
            return True


def _moves_forward(current: Delivery, reported: Delivery) -> bool:
    if current is Delivery.FAILED:
        return False
    if reported is Delivery.FAILED:
        return current is not Delivery.READ
    return _RANK.get(reported, 0) > _RANK.get(current, 0)


async def _settle(session: AsyncSession, message_id: int) -> None:
    """Set the reply's state from its parts: failed if any failed, else the least
    advanced part's state, once every part has been sent."""
    message = await session.get(Message, message_id)
    if message is None:
        return
    rows = (
        await session.execute(
            select(SentPart.status, SentPart.error)
            .where(SentPart.message_id == message_id)
            .order_by(SentPart.part)
        )
    ).all()
    failed = [
        row.error or "the platform reported the message as failed"
        for row in rows
        if row.status == Delivery.FAILED
    ]
    if failed:
        message.delivery = Delivery.FAILED
        message.delivery_error = failed[0]
        return
    if message.delivery in (Delivery.PENDING, Delivery.FAILED):
        return  # later parts are still on their way, or delivery gave up
    least = min((row.status for row in rows), key=lambda d: _RANK.get(d, 0))
    message.delivery = least


def _returning(change: Update) -> ReturningUpdate[int, uuid.UUID, int]:
    return change.returning(Message.id, Message.conversation_id, Message.seq)
