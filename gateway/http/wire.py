"""The message as every API shows it: web chat (HTTP and socket) and the operator API.

One shape, so a client reading both sees the same fields with the same types; the
operator API adds what only operators need (`OperatorMessage` in `gateway.http.api`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from memory.provenance import is_firing
from memory.storage.messages import StoredMessage


class MessageOut(BaseModel):
    seq: int
    role: Literal["user", "assistant", "event"]
    text: str
    channel: str
    # ISO-8601 with its offset ("Z" for UTC) on the wire.
    created_at: datetime

    @classmethod
    def of(cls, message: StoredMessage) -> MessageOut:
        return cls(**cls._fields(message))

    @staticmethod
    def _fields(message: StoredMessage) -> dict[str, object]:
        return {
            "seq": message.seq,
            # A reminder coming due is no one's typing: clients show it as an event.
            "role": "event" if is_firing(message.source) else message.role.value,
            "text": message.text,
            "channel": message.channel,
            "created_at": message.created_at,
        }
