"""A fetched file read for what it is: its kind and MIME type from its bytes (never the
name or the platform's word), an image made safe as every image is.

CPU work for a large file: callers run it in a thread, never on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import filetype

from gateway.errors import MediaRefused
from gateway.media.images import process_image

# Text read as a document: what a person sends as .txt or .md.
TEXT_MIMES = {"text/plain", "text/markdown"}


@dataclass(frozen=True, slots=True)
class ReadFile:
    kind: str  # image | audio | document | other: what the bytes are
    mime: str
    data: bytes  # as kept (an image re-encoded, anything else as sent)
    width: int | None = None
    height: int | None = None


def read_file(data: bytes, mime_hint: str = "") -> ReadFile:
    """The file as Parley keeps it; `MediaRefused` for an empty file, or an image that
    is corrupt, disguised or a bomb."""
    if not data:
        raise MediaRefused("empty", "the file is empty")
    guess = filetype.guess(data)
    if guess is not None and guess.mime.startswith("image/"):
        image = process_image(data)
        return ReadFile("image", image.mime, image.data, image.width, image.height)
    if guess is not None and guess.mime.startswith("audio/"):
        return ReadFile("audio", guess.mime, data)
    if guess is not None and guess.mime == "application/pdf":
        return ReadFile("document", guess.mime, data)
    if guess is None and _is_text(data):
        mime = mime_hint if mime_hint in TEXT_MIMES else "text/plain"
        return ReadFile("document", mime, data)
    return ReadFile("other", guess.mime if guess is not None else "application/octet-stream", data)


def _is_text(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return "\x00" not in text
