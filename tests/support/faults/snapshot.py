"""The database as the checks read it: raw rows, not the stores' views, so that what the
code under test would hide (a duplicate, a skipped chunk) shows."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


@dataclass(frozen=True)
class StoredRow:
    conversation: str
    seq: int
    role: str
    channel: str
    text: str
    platform_id: str | None
    reply_to_seq: int | None
    delivery: str | None
    parts_sent: int


@dataclass(frozen=True)
class ChunkRow:
    id: int
    conversation: str
    level: int
    seq_start: int
    seq_end: int
    status: str
    parent_id: int | None
    in_timeline: bool
    facts_extracted: bool


@dataclass(frozen=True)
class Snapshot:
    messages: list[StoredRow]
    chunks: list[ChunkRow]
    owing: list[str]  # conversations whose last user message is past the answered one

    def replies(self) -> list[StoredRow]:
        return [m for m in self.messages if m.reply_to_seq is not None and m.role != "user"]


MESSAGES = text(
    "SELECT CAST(conversation_id AS text) AS conversation, seq, role, channel, text, "
    "platform_message_id AS platform_id, reply_to_seq, delivery, "
    "delivery_parts_sent AS parts_sent FROM messages"
)
CHUNKS = text(
    "SELECT id, CAST(conversation_id AS text) AS conversation, level, seq_start, seq_end, "
    "status, parent_id, in_timeline, facts_extracted FROM chunks"
)
OWING = text("SELECT CAST(id AS text) FROM conversations WHERE last_user_seq > answered_seq")


async def snapshot(engine: AsyncEngine) -> Snapshot:
    async with engine.connect() as connection:
        messages = [StoredRow(**row._mapping) for row in await connection.execute(MESSAGES)]
        chunks = [ChunkRow(**row._mapping) for row in await connection.execute(CHUNKS)]
        owing = list((await connection.scalars(OWING)).all())
    return Snapshot(messages, chunks, owing)
