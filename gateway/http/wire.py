"""The message as every API shows it: web chat (HTTP and socket) and the operator API.

One shape, so a client reading both sees the same fields with the same types; the
operator API adds what only operators need (`OperatorMessage` in `gateway.http.api`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Literal
from urllib.parse import quote

from fastapi import Response
from pydantic import BaseModel, Field

from memory.provenance import is_firing
from memory.storage.attachments import AttachmentView
from memory.storage.messages import StoredMessage


class AttachmentOut(BaseModel):
    """A file sent with a message; its bytes at `GET /api/v1/attachments/{id}` (operators)
    or `GET /webchat/attachments/{id}` (the visitor whose conversation it is in)."""

    id: int
    kind: str  # image | audio | document | other
    mime: str  # sniffed from the bytes
    bytes: int
    state: str
    # What a model reads of it where it is not shown it (a description, a transcript).
    text: str | None
    width: int | None = None
    height: int | None = None
    file_name: str = ""  # as the sender named it (only a download uses it)

    @classmethod
    def of(cls, view: AttachmentView) -> AttachmentOut:
        return cls(
            id=view.id,
            file_name=view.file_name,
            kind=view.kind.value,
            mime=view.mime,
            bytes=view.size,
            state=view.state.value,
            text=view.text,
            width=view.width,
            height=view.height,
        )


class MessageOut(BaseModel):
    seq: int
    role: Literal["user", "assistant", "event"]
    text: str
    channel: str
    # ISO-8601 with its offset ("Z" for UTC) on the wire.
    created_at: datetime
    attachments: list[AttachmentOut] = Field(default_factory=list)

    @classmethod
    def of(cls, message: StoredMessage, files: Sequence[AttachmentView] = ()) -> MessageOut:
        return cls(**cls._fields(message), attachments=[AttachmentOut.of(f) for f in files])

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


def content_disposition(name: str) -> str:
    """A download under the sender's file name: plain ASCII for old clients, the name
    itself (RFC 5987) for the rest; never a quote or a path that ends the header."""
    plain = re.sub(r"[^A-Za-z0-9._ -]", "_", name)[:100] or "attachment"
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


def file_response(view: AttachmentView, data: bytes) -> Response:
    """A kept file as a download, under its sender's name: a browser never renders it in
    place (an SVG or a page sent as a file runs nothing on our origin)."""
    name = view.file_name or f"attachment-{view.id}"
    return Response(
        data,
        media_type=view.mime,
        headers={"Content-Disposition": content_disposition(name), "Cache-Control": "private"},
    )
