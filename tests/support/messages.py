"""Stored messages built in memory, for tests of pure functions over them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memory.storage.messages import StoredMessage
from memory.storage.models import Role

T0 = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


def stored(
    seq: int,
    role: Role,
    text: str = "",
    *,
    source: str | None = None,
    at: datetime = T0,
    tokens: int = 0,
    author: str = "Ann",
) -> StoredMessage:
    return StoredMessage(
        id=seq,
        conversation_id=uuid.UUID(int=1),
        seq=seq,
        role=role,
        channel="webchat",
        text=text,
        created_at=at,
        platform_ts=None,
        source=source,
        author_name=author,
        identity_id=None,
        platform_message_id=None,
        token_count=tokens,
        reply_to_seq=None,
        delivery=None,
    )
