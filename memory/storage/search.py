"""Full-text search over one conversation: its messages and its verbatim transcripts.

The indexes are the database's own (migration 0008): SQLite FTS5 tables kept current
by triggers, Postgres GIN indexes over `to_tsvector('simple', ...)`. Nothing here
writes them, so every path that stores, edits or deletes a message or a chunk keeps
search current without knowing it exists.

Whatever a person or a model types is searched for as words, never as query syntax:
each whitespace-separated word must occur (as a phrase of its tokens, so "don't" and
"foo-bar" find themselves), and nothing typed reaches the database as an operator.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    Select,
    String,
    and_,
    bindparam,
    func,
    literal,
    literal_column,
    or_,
    select,
    table,
    text,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
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
_FTS_TABLES = (MESSAGES_FTS, CHUNKS_FTS)


def is_search_object(name: str) -> bool:
    """Whether a table or index is one of search's own: an FTS5 table, one of its
    shadow tables, or a Postgres expression index."""
    return name in SEARCH_INDEXES or any(
        name == fts or name.startswith(f"{fts}_") for fts in _FTS_TABLES
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


class Search:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def search(
        self,
        conversation_id: uuid.UUID,
        query: str,
        *,
        limit: int,
        start: datetime | None = None,
        end: datetime | None = None,
        after: SearchPosition | None = None,
    ) -> list[SearchHit]:
        """Hits for every word of `query` in one conversation, newest first, at most
        `limit`; the next page starts `after` the last hit's `position`.

        Message hits include archived messages (they are still messages, and give the
        exact seq), so a word the person said is usually found both as a message and in
        its chunk's transcript; a transcript also matches words spread over several of
        its messages. Only level-0 chunks have transcripts.

        `start` (inclusive) and `end` (exclusive) bound a message's time; a chunk is in
        range when any part of its time range is. A query with no searchable word
        finds nothing. Matching is case-insensitive; SQLite also ignores diacritics,
        Postgres ('simple' config) does not.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if any(t is not None and t.tzinfo is None for t in (start, end)):
            raise ValueError("naive datetime given as a search bound")
        words = search_words(query)
        if not words:
            return []
        async with self._sessions() as session:
            index = _index(session)
            rows = (
                await session.execute(
                    _page(index, conversation_id, words, limit, start, end, after)
                )
            ).all()
            found = {
                source.kind: await index.details(
                    session, source, words, [r.row_id for r in rows if r.kind == source.kind]
                )
                for source in _SOURCES
            }
        hits = []
        for row in rows:
            detail = found[HitKind(row.kind)].get(row.row_id)
            if detail is None:  # deleted between the two reads
                continue
            snippet, rank = detail
            if row.kind == HitKind.MESSAGE:
                hits.append(SearchHit(HitKind.MESSAGE, row.time, snippet, rank, seq=row.key))
            else:
                hits.append(
                    SearchHit(
                        HitKind.CHUNK,
                        row.time,
                        snippet,
                        rank,
                        chunk_id=row.key,
                        level=0,
                        seq_start=row.seq_start,
                        seq_end=row.seq_end,
                    )
                )
        return hits

    async def conversations_with(self, query: str, *, limit: int) -> list[uuid.UUID]:
        """Conversations any of whose messages or transcripts has every word of `query`,
        most recently active first (finding a person by something they said)."""
        words = search_words(query)
        if not words:
            return []
        async with self._sessions() as session:
            index = _index(session)
            said = select(
                Message.conversation_id.label("id"), Message.created_at.label("at")
            ).where(index.matches(_MESSAGES, words))
            archived = select(Chunk.conversation_id.label("id"), Chunk.time_end.label("at")).where(
                Chunk.level == 0, Chunk.transcript.is_not(None), index.matches(_CHUNKS, words)
            )
            hits = union_all(said, archived).subquery()
            rows = await session.execute(
                select(hits.c.id)
                .group_by(hits.c.id)
                .order_by(func.max(hits.c.at).desc())
                .limit(limit)
            )
            return [row.id for row in rows]

    async def compact(self) -> None:
        """Merge SQLite's full-text index into one segment, so the words of deleted rows
        are gone from the file and not just marked deleted (after an erasure). It
        rewrites the whole index: not for every delete. Postgres: nothing to do (the
        index entries of deleted rows go with the rows, by vacuum)."""
        async with self._sessions() as session:
            if session.get_bind().dialect.name != "sqlite":
                return
            for fts in _FTS_TABLES:
                await session.execute(text(f"INSERT INTO {fts}({fts}) VALUES ('optimize')"))
            await session.commit()


# -- what is searched -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Source:
    kind: HitKind
    fts: str  # the SQLite FTS5 table
    id: InstrumentedAttribute[int]
    text: InstrumentedAttribute[Any]


_MESSAGES = _Source(HitKind.MESSAGE, MESSAGES_FTS, Message.id, Message.text)
_CHUNKS = _Source(HitKind.CHUNK, CHUNKS_FTS, Chunk.id, Chunk.transcript)
_SOURCES = (_MESSAGES, _CHUNKS)


def _page(
    index: _Index,
    conversation_id: uuid.UUID,
    words: Sequence[str],
    limit: int,
    start: datetime | None,
    end: datetime | None,
    after: SearchPosition | None,
) -> Select[Any]:
    """The page's hits (kind, key, row id, time, seq range), without snippets: those
    cost, so they are made for the page only."""
    messages = select(
        literal_column(f"'{HitKind.MESSAGE.value}'", String).label("kind"),
        Message.seq.label("key"),
        Message.id.label("row_id"),
        Message.created_at.label("time"),
        Message.seq.label("seq_start"),
        Message.seq.label("seq_end"),
    ).where(
        Message.conversation_id == conversation_id,
        index.matches(_MESSAGES, words),
        *_after(HitKind.MESSAGE, Message.created_at, Message.seq, after),
    )
    chunks = select(
        literal_column(f"'{HitKind.CHUNK.value}'", String).label("kind"),
        Chunk.id.label("key"),
        Chunk.id.label("row_id"),
        Chunk.time_start.label("time"),
        Chunk.seq_start,
        Chunk.seq_end,
    ).where(
        Chunk.conversation_id == conversation_id,
        Chunk.level == 0,
        Chunk.transcript.is_not(None),
        index.matches(_CHUNKS, words),
        *_after(HitKind.CHUNK, Chunk.time_start, Chunk.id, after),
    )
    if start is not None:
        messages = messages.where(Message.created_at >= start)
        chunks = chunks.where(Chunk.time_end >= start)
    if end is not None:
        messages = messages.where(Message.created_at < end)
        chunks = chunks.where(Chunk.time_start < end)
    hits = union_all(messages, chunks).subquery()
    return (
        select(hits)
        .order_by(hits.c.time.desc(), hits.c.kind.desc(), hits.c.key.desc())
        .limit(limit)
    )


def _after(
    kind: HitKind,
    time: InstrumentedAttribute[datetime],
    key: InstrumentedAttribute[int],
    after: SearchPosition | None,
) -> list[ColumnElement[bool]]:
    """The rows of one kind past `after` in the order (time, kind, key) descending."""
    if after is None:
        return []
    if kind == after.kind:
        return [or_(time < after.time, and_(time == after.time, key < after.key))]
    if kind < after.kind:  # this kind comes after that one at an equal time
        return [time <= after.time]
    return [time < after.time]


# -- the two databases' full-text search ------------------------------------------------


class _Index(Protocol):
    def matches(self, source: _Source, words: Sequence[str]) -> ColumnElement[bool]:
        """Whether a row of `source` has every word."""
        ...

    async def details(
        self, session: AsyncSession, source: _Source, words: Sequence[str], ids: list[int]
    ) -> dict[int, tuple[str, float]]:
        """Snippet and rank of each of these rows (ids that match)."""
        ...


def _index(session: AsyncSession) -> _Index:
    return _FTS5() if session.get_bind().dialect.name == "sqlite" else _TsVector()


class _FTS5:
    """SQLite: each word becomes an FTS5 string (a phrase of its tokens, tokenised like
    the text was), and the strings are ANDed, so no operator or syntax error can come
    from what was typed."""

    @staticmethod
    def _match(words: Sequence[str]) -> str:
        return " AND ".join('"' + word.replace('"', '""') + '"' for word in words)

    def matches(self, source: _Source, words: Sequence[str]) -> ColumnElement[bool]:
        found: Select[Any] = (
            select(literal_column("rowid"))
            .select_from(table(source.fts))
            .where(literal_column(source.fts).op("MATCH")(literal(self._match(words))))
        )
        return source.id.in_(found)

    async def details(
        self, session: AsyncSession, source: _Source, words: Sequence[str], ids: list[int]
    ) -> dict[int, tuple[str, float]]:
        if not ids:
            return {}
        fts = source.fts
        query = text(
            f"SELECT rowid, snippet({fts}, 0, :start, :end, :ellipsis, :tokens), bm25({fts}) "
            f"FROM {fts} WHERE {fts} MATCH :match AND rowid IN :ids"
        ).bindparams(bindparam("ids", expanding=True))
        rows = await session.execute(
            query,
            {
                "start": MARK_START,
                "end": MARK_END,
                "ellipsis": ELLIPSIS,
                "tokens": SNIPPET_TOKENS,
                "match": self._match(words),
                "ids": ids,
            },
        )
        # bm25 is lower for a better match; rank is higher.
        return {row_id: (snippet, -score) for row_id, snippet, score in rows}


# The config as a literal, as in the indexes' expressions: a bound parameter would not
# match them, and Postgres would not use the index.
_SIMPLE: ColumnElement[str] = literal_column("'simple'")
_HEADLINE = (
    f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords={SNIPPET_TOKENS}, "
    f"MinWords={SNIPPET_TOKENS // 3}, MaxFragments=1, FragmentDelimiter={ELLIPSIS}"
)


class _TsVector:
    """Postgres: each word becomes a quoted phrase for `websearch_to_tsquery`, which
    never raises on its input; the phrases are ANDed, like on SQLite."""

    @staticmethod
    def _query(words: Sequence[str]) -> ColumnElement[Any]:
        phrases = " ".join('"' + word.replace('"', " ") + '"' for word in words)
        return func.websearch_to_tsquery(_SIMPLE, literal(phrases))

    def matches(self, source: _Source, words: Sequence[str]) -> ColumnElement[bool]:
        return func.to_tsvector(_SIMPLE, source.text).op("@@")(self._query(words))

    async def details(
        self, session: AsyncSession, source: _Source, words: Sequence[str], ids: list[int]
    ) -> dict[int, tuple[str, float]]:
        if not ids:
            return {}
        query = self._query(words)
        rows = await session.execute(
            select(
                source.id,
                func.ts_headline(_SIMPLE, source.text, query, literal(_HEADLINE)),
                func.ts_rank(func.to_tsvector(_SIMPLE, source.text), query),
            ).where(source.id.in_(ids))
        )
        return {row_id: (snippet, float(rank)) for row_id, snippet, rank in rows}
