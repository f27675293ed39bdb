"""What is searched and how a hit looks: the words of a query, the two kinds of row a
search finds (messages, level-0 transcripts) and the columns, bounds and shape of a hit.

Whatever a person or a model types is searched for as words, never as query syntax: each
whitespace-separated word must occur (as a phrase of its tokens, so "don't" and
"foo-bar" find themselves), or with `any_word` any one of them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    FromClause,
    String,
    func,
    literal_column,
)
from sqlalchemy.orm import InstrumentedAttribute

from memory.storage.models import Chunk, Message

# How a match is marked in a snippet (plain text: the REST API and the model see it).
MARK_START = "«"
MARK_END = "»"
ELLIPSIS = "…"
# Tokens around a match in a SQLite snippet; words in a Postgres headline.
SNIPPET_TOKENS = 16
# Words searched for at most; more only narrow the hits further and cost more.
MAX_WORDS = 32

# What migration 0008 made. The models do not describe these, so schema comparisons
# leave them out (`is_search_object`).
MESSAGES_FTS = "messages_fts"
CHUNKS_FTS = "chunks_fts"
SEARCH_INDEXES = frozenset({"ix_messages_text_search", "ix_chunks_transcript_search"})
# An FTS5 table keeps its index in shadow tables named after it (`<name>_data`, ...).
FTS_TABLES = (MESSAGES_FTS, CHUNKS_FTS)


def is_search_object(name: str) -> bool:
    """Whether a table or index is one of search's own: an FTS5 table, one of its
    shadow tables, or a Postgres expression index."""
    return name in SEARCH_INDEXES or any(
        name == fts or name.startswith(f"{fts}_") for fts in FTS_TABLES
    )


class HitKind(StrEnum):
    MESSAGE = "message"
    CHUNK = "chunk"


@dataclass(frozen=True, slots=True)
class SearchPosition:
    """Where a page of hits ended: pass it as `after` for the next page.

    Hits come newest first, by (time, kind, key) descending, where key is the
    message's seq or the chunk's id: a total order, so every hit is on exactly one
    page, also while new messages arrive (they come before any page already read).
    """

    time: datetime
    kind: HitKind
    key: int

    def token(self) -> str:
        """The position as text, for a cursor handed to a client."""
        return f"{self.kind.value}:{self.key}:{self.time.isoformat()}"

    @classmethod
    def from_token(cls, token: str) -> SearchPosition:
        """The position a `token()` gave; ValueError for anything else."""
        kind, key, time = token.split(":", 2)
        when = datetime.fromisoformat(time)
        if when.tzinfo is None:
            raise ValueError("search position without a time zone")
        return cls(when, HitKind(kind), int(key))


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A message or a level-0 transcript that has every word searched for.

    `snippet` is a short excerpt with each match between `MARK_START` and `MARK_END`.
    `time` is the message's `created_at`, or the chunk's `time_start`. `rank` is
    higher for a better match; it compares hits of one kind within one search only
    (messages and transcripts are scored by different indexes).
    """

    kind: HitKind
    time: datetime
    snippet: str
    rank: float
    seq: int | None = None  # a message's
    chunk_id: int | None = None  # a chunk's, with its level (always 0) and seq range
    level: int | None = None
    seq_start: int | None = None
    seq_end: int | None = None

    @property
    def position(self) -> SearchPosition:
        key = self.seq if self.kind is HitKind.MESSAGE else self.chunk_id
        assert key is not None
        return SearchPosition(self.time, self.kind, key)


def search_words(query: str) -> list[str]:
    """The words of a query that can match anything, at most `MAX_WORDS`.

    A word with no letter or digit (`*`, `"`, `(`) is dropped: both indexes skip such
    text, and an empty phrase would match nothing. NUL and unpaired surrogates, which
    no database takes in a string, go first.
    """
    cleaned = query.replace("\x00", " ").encode("utf-8", "ignore").decode("utf-8")
    words = [word for word in cleaned.split() if any(c.isalnum() for c in word)]
    return words[:MAX_WORDS]


def checked_words(
    query: str, limit: int, start: datetime | None, end: datetime | None
) -> list[str]:
    """The words to search for (none: nothing can match); ValueError for a limit or a
    time bound no search takes."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if any(t is not None and t.tzinfo is None for t in (start, end)):
        raise ValueError("naive datetime given as a search bound")
    return search_words(query)


# -- what is searched -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Source:
    kind: HitKind
    fts: str  # the SQLite FTS5 table
    table: FromClause
    id: InstrumentedAttribute[int]
    # What is searched: as the Postgres index spells it (migration 0023 for messages).
    text: ColumnElement[Any] | InstrumentedAttribute[Any]


def searched(message: type[Message]) -> ColumnElement[str]:
    """A message's searched words: its text and its files line (a voice note's
    transcript, an image's description). Constants as literals: a bound parameter would
    not match the index's expression."""
    media = func.coalesce(message.media, literal_column("''"))
    return message.text.op("||")(literal_column("' '")).op("||")(media)


MESSAGES = Source(HitKind.MESSAGE, MESSAGES_FTS, Message.__table__, Message.id, searched(Message))
CHUNKS = Source(HitKind.CHUNK, CHUNKS_FTS, Chunk.__table__, Chunk.id, Chunk.transcript)
SOURCES = (MESSAGES, CHUNKS)


def columns(source: Source) -> list[ColumnElement[Any]]:
    """What a hit is read with: its kind, key, row id, time and seq range."""
    kind = literal_column(f"'{source.kind.value}'", String).label("kind")
    if source.kind is HitKind.MESSAGE:
        return [
            kind,
            Message.seq.label("key"),
            Message.id.label("row_id"),
            Message.created_at.label("time"),
            Message.seq.label("seq_start"),
            Message.seq.label("seq_end"),
        ]
    return [
        kind,
        Chunk.id.label("key"),
        Chunk.id.label("row_id"),
        Chunk.time_start.label("time"),
        Chunk.seq_start.label("seq_start"),
        Chunk.seq_end.label("seq_end"),
    ]


def time_of(source: Source) -> InstrumentedAttribute[datetime]:
    return Message.created_at if source.kind is HitKind.MESSAGE else Chunk.time_start


def within(
    source: Source, conversation_id: uuid.UUID, start: datetime | None, end: datetime | None
) -> list[ColumnElement[bool]]:
    """A row of `source` in the conversation and the time range: a message's time in
    it, a level-0 transcript's time range overlapping it."""
    if source.kind is HitKind.MESSAGE:
        conditions = [Message.conversation_id == conversation_id]
        if start is not None:
            conditions.append(Message.created_at >= start)
        if end is not None:
            conditions.append(Message.created_at < end)
        return conditions
    conditions = [
        Chunk.conversation_id == conversation_id,
        Chunk.level == 0,
        Chunk.transcript.is_not(None),
    ]
    if start is not None:
        conditions.append(Chunk.time_end >= start)
    if end is not None:
        conditions.append(Chunk.time_start < end)
    return conditions


def hit(kind: HitKind, row: Any, snippet: str, rank: float) -> SearchHit:
    if kind is HitKind.MESSAGE:
        return SearchHit(HitKind.MESSAGE, row.time, snippet, rank, seq=row.key)
    return SearchHit(
        HitKind.CHUNK,
        row.time,
        snippet,
        rank,
        chunk_id=row.key,
        level=0,
        seq_start=row.seq_start,
        seq_end=row.seq_end,
    )
