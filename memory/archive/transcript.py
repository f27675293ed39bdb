"""Verbatim transcripts of archived messages: stored with the chunk and as a text file."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from memory.escaping import escape_typed, header_value
from memory.storage.files import private_dir, tighten, write_private
from memory.storage.messages import StoredMessage
from memory.storage.models import Role
from memory.zones import zone


def render_transcript(messages: Sequence[StoredMessage], timezone: str) -> str:
    """One block per message: a header the gateway writes, then the text as sent.

    The text is escaped like in the prompt (`memory.provenance`), so none of its lines
    passes for a header, whatever line break or unseen character comes before it: this
    is what the summariser reads and what the archive keeps. Everything the person did
    not type keeps its source in the header; a message's files follow its text, one
    line each as the gateway writes them.
    """
    tz = zone(timezone)
    blocks = []
    for message in messages:
        when = message.sent_at.astimezone(tz).strftime("%Y-%m-%d %H:%M")
        who = speaker(message)
        body = "\n".join(part for part in (escape_typed(message.text), message.media or "") if part)
        blocks.append(f"[{when} · {message.channel} · {who}]\n{body}")
    return "\n\n".join(blocks) + "\n"


def speaker(message: StoredMessage) -> str:
    """Who wrote a message, as a transcript's header names them: on one line, never
    closing the header early (a name is typed by its owner)."""
    if message.role is Role.ASSISTANT:
        return "assistant"
    if message.source is not None:
        return f"source: {header_value(message.source)}"
    return f"user {header_value(message.author_name)}".strip()


def transcript_path(
    archive_dir: Path, conversation_id: uuid.UUID, chunk_id: int, start: datetime
) -> Path:
    return archive_dir / str(conversation_id) / f"{start:%Y-%m-%d}-chunk-{chunk_id}.txt"


def write_transcript(path: Path, text: str) -> None:
    """Write atomically (a reader never sees half a file), for its owner's eyes only.

    `path` is laid out by `transcript_path`: its parent is the conversation's directory
    and the one above it the archive, both Parley's own, so both are tightened too.
    """
    private_dir(path.parent)
    tighten(path.parent)
    tighten(path.parent.parent)
    write_private(path, text)
