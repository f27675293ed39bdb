"""Repository for preview messages: a reply shown on a platform while it is written,
by one message edited as it grows (DESIGN §10).

A preview is kept from when the platform took it until the reply's first part is
edited into it (`Deliveries.part_sent`). A turn run again after a crash takes over
the preview its first run left (`adopt`), so the reply ends up in that one message.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.models import Message, StreamPreview


@dataclass(frozen=True, slots=True)
class PreviewPlace:
    """Where a turn's preview is: its conversation, the last message it answers, and
    the chat on the platform (a group id, or the person's own address)."""

    conversation_id: uuid.UUID
    trigger_seq: int
    channel: str
    chat: str


class Previews:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def record(self, place: PreviewPlace, platform_message_id: str) -> None:
        """The platform took a new preview message."""
        async with self._sessions() as session:
            session.add(
                StreamPreview(
                    conversation_id=place.conversation_id,
                    trigger_seq=place.trigger_seq,
                    channel=place.channel,
                    chat=place.chat,
                    platform_message_id=platform_message_id,
                )
            )
            await session.commit()

    async def adopt(self, place: PreviewPlace) -> str | None:
        """The platform id of a preview a crashed run of this turn left in this chat (its
        messages still unanswered), now this turn's; None if there is none. Costs a
        write only when there is one to take over."""
        answered = exists().where(
            Message.conversation_id == StreamPreview.conversation_id,
            Message.reply_to_seq >= StreamPreview.trigger_seq,
        )
        query = (
            select(StreamPreview.id, StreamPreview.trigger_seq, StreamPreview.platform_message_id)
            .where(
                StreamPreview.conversation_id == place.conversation_id,
                StreamPreview.channel == place.channel,
                StreamPreview.chat == place.chat,
                StreamPreview.trigger_seq <= place.trigger_seq,
                ~answered,
            )
            .order_by(StreamPreview.trigger_seq.desc())
            .limit(1)
        )
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
            if row is None:
                return None
            if row.trigger_seq != place.trigger_seq:
                # More was said meanwhile: the reply now answers that too.
                await session.execute(
                    update(StreamPreview)
                    .where(StreamPreview.id == row.id)
                    .values(trigger_seq=place.trigger_seq)
                )
                await session.commit()
        return str(row.platform_message_id)
