"""The words of a document: a PDF's text page by page (pypdf), a text or Markdown file as
written. What a model reads of a file it cannot be shown.

Bounded, whatever the file: at most `MAX_PAGES` pages and `MAX_CHARS` characters, so a
hostile PDF costs a bounded time (callers run this in a thread) and a bounded row.
"""

from __future__ import annotations

import io

from pypdf import PdfReader
from pypdf.errors import PyPdfError

from memory.storage.attachments import PAGE_BREAK

MAX_PAGES = 500
MAX_CHARS = 1_000_000


def document_text(mime: str, data: bytes) -> str | None:
    """The document's words, a PDF's pages apart (`PAGE_BREAK`); None where none could be
    read (an image-only or broken PDF, a file of another kind)."""
    if mime == "application/pdf":
        return _pdf(data)
    if mime.startswith("text/"):
        return data.decode("utf-8", errors="replace").replace("\x00", "")[:MAX_CHARS] or None
    return None


def _pdf(data: bytes) -> str | None:
    try:
        reader = PdfReader(io.BytesIO(data))
        texts: list[str] = []
        size = 0
        for page in reader.pages[:MAX_PAGES]:
            text = " ".join((page.extract_text() or "").split(" "))
            texts.append(text.replace(PAGE_BREAK, " ").strip())
            size += len(text)
            if size >= MAX_CHARS:
                break
    except (PyPdfError, ValueError, KeyError, TypeError, RecursionError, OSError):
        return None
    joined = PAGE_BREAK.join(texts)[:MAX_CHARS]
    return joined if joined.strip() else None
