"""Full-text search over one conversation: its messages and its verbatim transcripts.

The indexes are the database's own (migration 0008): SQLite FTS5 tables kept current
by triggers, Postgres GIN indexes over `to_tsvector('simple', ...)`. Nothing here
writes them, so every path that stores, edits or deletes a message or a chunk keeps
search current without knowing it exists.

Whatever a person or a model types is searched for as words, never as query syntax:
each whitespace-separated word must occur (as a phrase of its tokens, so "don't" and
"foo-bar" find themselves), or for `best(any_word=True)` any one of them, and nothing
typed reaches the database as an operator.

`search` pages through every hit newest first (the REST API); `best` finds the most
relevant hits by the index's own score (FTS5 bm25, Postgres ts_rank_cd), however old
(the model's recall).
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
    FromClause,
    Select,
    String,
    and_,
    bindparam,
    column,
    exists,
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
from sqlalchemy.orm import InstrumentedAttribute, aliased

from memory.storage.models import Chunk, Message

# How a match is marked in a snippet (plain text: the REST API and the model see it).
MARK_START = "«"
MARK_END = "»"
ELLIPSIS = "…"
# Tokens around a match in a SQLite snippet; words in a Postgres headline.
SNIPPET_TOKENS = 16
# Words searched for at most; more only narrow the hits further and cost more.
MAX_WORDS = 32
# `best` counts the matches of each kind up to this many: past it, "at least".
COUNT_LIMIT = 1000

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


@dataclass(frozen=True, slots=True)
class LeftOut:
    """Messages `best` leaves out: any from one of `sources`, and any that a message from
    one of `answered_by` answers (a chat command, answered by the gateway). A transcript
    is then found only by words of the messages it keeps."""

    sources: frozenset[str] = frozenset()
    answered_by: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Ranked:
    """The most relevant hits of one search, each kind best first, and how many of each
    kind match (at most `COUNT_LIMIT`: a count that reached it means at least that)."""

    messages: list[SearchHit]
    chunks: list[SearchHit]
    message_count: int
    chunk_count: int


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
            kind = HitKind(row.kind)
            detail = found[kind].get(row.row_id)
            if detail is None:  # deleted between the two reads
                continue
            snippet, rank = detail
            hits.append(_hit(kind, row, snippet, rank))
        return hits

    async def best(
        self,
        conversation_id: uuid.UUID,
        query: str,
        *,
        limit: int,
        start: datetime | None = None,
        end: datetime | None = None,
        any_word: bool = False,
        left_out: LeftOut | None = None,
    ) -> Ranked:
        """The `limit` most relevant messages and the `limit` most relevant level-0
        transcripts of one conversation with every word of `query` (`any_word`: with
        any), as `search` finds them, whatever their age; the newer first of equals.
        Without the messages `left_out` names."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if any(t is not None and t.tzinfo is None for t in (start, end)):
            raise ValueError("naive datetime given as a search bound")
        words = search_words(query)
        if not words:
            return Ranked([], [], 0, 0)
        async with self._sessions() as session:
            index = _index(session)
            found = {
                source.kind: await _ranked(
                    session,
                    index.scored(source, words, any_word=any_word),
                    source,
                    _in(source, conversation_id, start, end)
                    + _keeping(index, source, words, any_word, left_out),
                    limit,
                )
                for source in _SOURCES
            }
            snippets = {
                source.kind: await index.details(
                    session,
                    source,
                    words,
                    [row.row_id for row in found[source.kind][0]],
                    any_word=any_word,
                )
                for source in _SOURCES
            }
        hits = {
            kind: [
                _hit(kind, row, snippets[kind][row.row_id][0], float(row.score))
                for row in rows
                if row.row_id in snippets[kind]  # else deleted between the reads
            ]
            for kind, (rows, _) in found.items()
        }
        return Ranked(
            hits[HitKind.MESSAGE],
            hits[HitKind.CHUNK],
            found[HitKind.MESSAGE][1],
            found[HitKind.CHUNK][1],
        )

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
    table: FromClause
    id: InstrumentedAttribute[int]
    text: InstrumentedAttribute[Any]


_MESSAGES = _Source(HitKind.MESSAGE, MESSAGES_FTS, Message.__table__, Message.id, Message.text)
_CHUNKS = _Source(HitKind.CHUNK, CHUNKS_FTS, Chunk.__table__, Chunk.id, Chunk.transcript)
_SOURCES = (_MESSAGES, _CHUNKS)


async def _ranked(
    session: AsyncSession,
    scored: tuple[tuple[FromClause, ColumnElement[bool]], ColumnElement[float]],
    source: _Source,
    conditions: list[ColumnElement[bool]],
    limit: int,
) -> tuple[list[Any], int]:
    """The best `limit` rows of `source` that match and meet `conditions`, by score,
    and how many match (up to COUNT_LIMIT)."""
    (where, match), score = scored
    best = (
        select(*_columns(source), score.label("score"))
        .select_from(where)
        .where(match, *conditions)
        .order_by(score.desc(), _time(source).desc())
        .limit(limit)
    )
    rows = list(await session.execute(best))
    matching = select(literal(1)).select_from(where).where(match, *conditions)
    count = await session.scalar(
        select(func.count()).select_from(matching.limit(COUNT_LIMIT).subquery())
    )
    return rows, int(count or 0)


def _columns(source: _Source) -> list[ColumnElement[Any]]:
    """What a ranked hit is read with: its key, row id, time and seq range."""
    if source.kind is HitKind.MESSAGE:
        return [
            Message.seq.label("key"),
            Message.id.label("row_id"),
            Message.created_at.label("time"),
            Message.seq.label("seq_start"),
            Message.seq.label("seq_end"),
        ]
    return [
        Chunk.id.label("key"),
        Chunk.id.label("row_id"),
        Chunk.time_start.label("time"),
        Chunk.seq_start.label("seq_start"),
        Chunk.seq_end.label("seq_end"),
    ]


def _time(source: _Source) -> InstrumentedAttribute[datetime]:
    return Message.created_at if source.kind is HitKind.MESSAGE else Chunk.time_start


def _in(
    source: _Source, conversation_id: uuid.UUID, start: datetime | None, end: datetime | None
) -> list[ColumnElement[bool]]:
    """A row of `source` in the conversation and the time range (a transcript overlaps
    it), as `search` takes them."""
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


def _keeping(
    index: _Index,
    source: _Source,
    words: Sequence[str],
    any_word: bool,
    left_out: LeftOut | None,
) -> list[ColumnElement[bool]]:
    """A message `left_out` does not name; a transcript with the words (every one, or
    any) in messages it does not name."""
    if left_out is None:
        return []
    if source.kind is HitKind.MESSAGE:
        return _kept(Message, left_out)
    said = aliased(Message)
    in_said = _Source(HitKind.MESSAGE, MESSAGES_FTS, Message.__table__, said.id, said.text)

    def said_here(wanted: Sequence[str]) -> ColumnElement[bool]:
        return exists().where(
            said.conversation_id == Chunk.conversation_id,
            said.seq.between(Chunk.seq_start, Chunk.seq_end),
            index.matches(in_said, wanted, any_word=any_word),
            *_kept(said, left_out),
        )

    return [said_here(words)] if any_word else [said_here([word]) for word in words]


def _kept(message: type[Message], left_out: LeftOut) -> list[ColumnElement[bool]]:
    kept: list[ColumnElement[bool]] = []
    if left_out.sources:
        sources = sorted(left_out.sources)
        kept.append(or_(message.source.is_(None), message.source.not_in(sources)))
    if left_out.answered_by:
        answer = aliased(Message)
        kept.append(
            ~exists().where(
                answer.conversation_id == message.conversation_id,
                answer.reply_to_seq == message.seq,
                answer.source.in_(sorted(left_out.answered_by)),
            )
        )
    return kept


def _hit(kind: HitKind, row: Any, snippet: str, rank: float) -> SearchHit:
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
        literal_column(f"'{HitKind.MESSAGE.value}'", String).label("kind"), *_columns(_MESSAGES)
    ).where(
        *_in(_MESSAGES, conversation_id, start, end),
        index.matches(_MESSAGES, words),
        *_after(HitKind.MESSAGE, Message.created_at, Message.seq, after),
    )
    chunks = select(
        literal_column(f"'{HitKind.CHUNK.value}'", String).label("kind"), *_columns(_CHUNKS)
    ).where(
        *_in(_CHUNKS, conversation_id, start, end),
        index.matches(_CHUNKS, words),
        *_after(HitKind.CHUNK, Chunk.time_start, Chunk.id, after),
    )
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
    def matches(
        self, source: _Source, words: Sequence[str], *, any_word: bool = False
    ) -> ColumnElement[bool]:
        """Whether a row of `source` has every word (`any_word`: any)."""
        ...

    def scored(
        self, source: _Source, words: Sequence[str], *, any_word: bool
    ) -> tuple[tuple[FromClause, ColumnElement[bool]], ColumnElement[float]]:
        """What to select matching rows of `source` from and the condition they meet,
        and the index's score of a row there, higher for a better match."""
        ...

    async def details(
        self,
        session: AsyncSession,
        source: _Source,
        words: Sequence[str],
        ids: list[int],
        *,
        any_word: bool = False,
    ) -> dict[int, tuple[str, float]]:
        """Snippet and rank of each of these rows (ids that match)."""
        ...


def _index(session: AsyncSession) -> _Index:
    return _FTS5() if session.get_bind().dialect.name == "sqlite" else _TsVector()


class _FTS5:
    """SQLite: each word becomes an FTS5 string (a phrase of its tokens, tokenised like
    the text was), and the strings are ANDed (or ORed), so no operator or syntax error
    can come from what was typed."""

    @staticmethod
    def _match(words: Sequence[str], any_word: bool = False) -> str:
        joint = " OR " if any_word else " AND "
        return joint.join('"' + word.replace('"', '""') + '"' for word in words)

    def matches(
        self, source: _Source, words: Sequence[str], *, any_word: bool = False
    ) -> ColumnElement[bool]:
        match = literal(self._match(words, any_word))
        found: Select[Any] = (
            select(literal_column("rowid"))
            .select_from(table(source.fts))
            .where(literal_column(source.fts).op("MATCH")(match))
        )
        return source.id.in_(found)

    def scored(
        self, source: _Source, words: Sequence[str], *, any_word: bool
    ) -> tuple[tuple[FromClause, ColumnElement[bool]], ColumnElement[float]]:
        # bm25 is an FTS5 function: the FTS table is read, joined to its rows.
        fts = table(source.fts, column("rowid"))
        joined = fts.join(source.table, source.id == fts.c.rowid)
        match = literal_column(source.fts).op("MATCH")(literal(self._match(words, any_word)))
        # bm25 is lower for a better match.
        return (joined, match), -func.bm25(literal_column(source.fts))

    async def details(
        self,
        session: AsyncSession,
        source: _Source,
        words: Sequence[str],
        ids: list[int],
        *,
        any_word: bool = False,
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
                "match": self._match(words, any_word),
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
    never raises on its input; the phrases are ANDed (or ORed), like on SQLite."""

    @staticmethod
    def _query(words: Sequence[str], any_word: bool = False) -> ColumnElement[Any]:
        joint = " or " if any_word else " "
        phrases = joint.join('"' + word.replace('"', " ") + '"' for word in words)
        return func.websearch_to_tsquery(_SIMPLE, literal(phrases))

    def matches(
        self, source: _Source, words: Sequence[str], *, any_word: bool = False
    ) -> ColumnElement[bool]:
        return func.to_tsvector(_SIMPLE, source.text).op("@@")(self._query(words, any_word))

    def scored(
        self, source: _Source, words: Sequence[str], *, any_word: bool
    ) -> tuple[tuple[FromClause, ColumnElement[bool]], ColumnElement[float]]:
        # The rows are found through the GIN index over the same expression; the score
        # weighs how often and how close together the words occur.
        vector = func.to_tsvector(_SIMPLE, source.text)
        query = self._query(words, any_word)
        return (source.table, vector.op("@@")(query)), func.ts_rank_cd(vector, query)

    async def details(
        self,
        session: AsyncSession,
        source: _Source,
        words: Sequence[str],
        ids: list[int],
        *,
        any_word: bool = False,
    ) -> dict[int, tuple[str, float]]:
        if not ids:
            return {}
        query = self._query(words, any_word)
        rows = await session.execute(
            select(
                source.id,
                func.ts_headline(_SIMPLE, source.text, query, literal(_HEADLINE)),
                func.ts_rank(func.to_tsvector(_SIMPLE, source.text), query),
            ).where(source.id.in_(ids))
        )
        return {row_id: (snippet, float(rank)) for row_id, snippet, rank in rows}
