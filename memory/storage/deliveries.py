"""Repository for the delivery state of replies: parts sent, failures, receipts.

A reply split into parts records each part the platform took in the same transaction
that advances `delivery_parts_sent`, so a retry after a 429 or a crash resumes with the
first part not yet sent and never repeats one. Receipts (WhatsApp statuses) find the
reply through the platform id of the part they are about.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Update, delete, func, null, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.dml import ReturningUpdate

from memory.storage.engine import writer_queue
from memory.storage.inserts import insert_or_skip
from memory.storage.models import (
    Conversation,
    ConversationKind,
    Delivery,
    Identity,
    Message,
    SentPart,
    StreamPreview,
)

# Receipts only ever move a part forward; they arrive in any order.
_RANK = {Delivery.SENT: 1, Delivery.DELIVERED: 2, Delivery.READ: 3}


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
        query = (
            select(Identity.external_id, Conversation.kind, Conversation.group_id)
            .select_from(Conversation)
            .outerjoin(Identity, Identity.id == identity_id)
            .where(Conversation.id == conversation_id)
        )
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
        if row is None:
            return "", None
        group = row.group_id if row.kind == ConversationKind.GROUP else None
        return row.external_id or "", group

    async def state(
        self, message_id: int, *, preview_in: str | None = None
    ) -> DeliveryState | None:
        """Where a reply's delivery stands; with `preview_in` (a chat), also the preview
        that showed it there while it was written, if one did."""
        preview = (
            select(StreamPreview.platform_message_id)
            .where(
                StreamPreview.conversation_id == Message.conversation_id,
                StreamPreview.trigger_seq == Message.reply_to_seq,
                StreamPreview.channel == Message.channel,
                StreamPreview.chat == preview_in,
            )
            .limit(1)
            .scalar_subquery()
        )
        query = select(
            Message.delivery,
            Message.delivery_parts_sent,
            Message.delivery_attempts,
            Message.delivery_sending_part,
            (preview if preview_in is not None else null()).label("preview"),
        ).where(Message.id == message_id)
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
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
        """A send call for `part` is about to go out (cleared once its answer is in)."""
        await self._update(message_id, delivery_sending_part=part)

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
        async with self._writes, self._sessions() as session:
            await session.execute(update(Message).where(Message.id == message_id).values(values))
            await session.commit()

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
        """The platform took `part`. With `last`, the reply is sent too, in the same
        transaction (what `sent` does): the reply it moved, or None as `sent` says.
        `preview`: the part was edited into that preview message, done with now."""
        async with self._writes, self._sessions() as session:
            if preview is not None:
                await session.execute(
                    delete(StreamPreview).where(
                        StreamPreview.channel == channel,
                        StreamPreview.platform_message_id == preview,
                    )
                )
            if platform_id is not None:
                # A part recorded before (a resend after a crash) is counted only.
                await session.execute(
                    insert_or_skip(session, SentPart).values(
                        message_id=message_id,
                        part=part,
                        channel=channel,
                        platform_message_id=platform_id,
                        status=Delivery.SENT,
                        updated_at=now,
                    )
                )
            done = {"delivery_parts_sent": part + 1, "delivery_sending_part": None}
            await session.execute(update(Message).where(Message.id == message_id).values(done))
            moved = None
            if last:
                row = (await session.execute(_returning(_sent(message_id)))).one_or_none()
                moved = None if row is None else DeliveryMoved(row.id, row.conversation_id, row.seq)
            await session.commit()
        return moved

    async def sent(self, message_id: int) -> DeliveryMoved | None:
        """Every part went out; None if the reply was no longer pending (receipts that
        came first are not undone) or is gone."""
        return await self._move(_sent(message_id))

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
        return await self._move(update(Message).where(Message.id == message_id).values(values))

    async def send_again(self, message_id: int) -> DeliveryMoved | None:
        """Make a failed delivery pending again, from its first unsent part; None if the
        message is not a failed delivery."""
        return await self._move(
            update(Message)
            .where(Message.id == message_id, Message.delivery == Delivery.FAILED)
            .values(delivery=Delivery.PENDING, delivery_attempts=0, delivery_error=None)
        )

    async def _move(self, change: Update) -> DeliveryMoved | None:
        """Apply `change` to one reply and say where that reply is, in the same
        statement (RETURNING): announcing a delivery costs no read of its own."""
        async with self._writes, self._sessions() as session:
            row = (await session.execute(_returning(change))).one_or_none()
            await session.commit()
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


def _sent(message_id: int) -> Update:
    return (
        update(Message)
        .where(Message.id == message_id, Message.delivery == Delivery.PENDING)
        .values(delivery=Delivery.SENT, delivery_attempts=Message.delivery_attempts + 1)
    )


def _returning(change: Update) -> ReturningUpdate[int, uuid.UUID, int]:
    return change.returning(Message.id, Message.conversation_id, Message.seq)
