"""The two databases' full-text indexes, behind one interface.

The indexes are the database's own (migration 0008): SQLite FTS5 tables kept current by
triggers, Postgres GIN indexes over `to_tsvector('simple', ...)`. Nothing here writes
them, so every path that stores, edits or deletes a message or a chunk keeps search
current without knowing it exists. Nothing typed reaches either database as an operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    FromClause,
    Select,
    bindparam,
    column,
    func,
    literal,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.ext.asyncio import AsyncSession

from memory.storage.search._hits import (
    ELLIPSIS,
    MARK_END,
    MARK_START,
    SNIPPET_TOKENS,
    SOURCES,
    HitKind,
    SearchHit,
    Source,
    hit,
)


class Index(Protocol):
    async def prepare(self, session: AsyncSession) -> None:
        """Set up `session`'s transaction for the searches that follow in it."""
        ...

    def matches(
        self, source: Source, words: Sequence[str], *, any_word: bool = False
    ) -> ColumnElement[bool]:
        """Whether a row of `source` has every word (`any_word`: any)."""
        ...

    def scored(
        self, source: Source, words: Sequence[str], *, any_word: bool
    ) -> tuple[FromClause, list[ColumnElement[bool]], ColumnElement[float]]:
        """How to score rows of `source` already known to match: what to select them
        from, what the score needs of them there, and the index's score, higher for a
        better match."""
        ...

    async def details(
        self,
        session: AsyncSession,
        source: Source,
        words: Sequence[str],
        ids: list[int],
        *,
        any_word: bool = False,
        ranked: bool = True,
    ) -> dict[int, tuple[str, float]]:
        """Snippet and rank of each of these rows (ids that match); without `ranked`,
        the rank is 0 (the caller has its own)."""
        ...


def index_for(session: AsyncSession) -> Index:
    return FTS5() if session.get_bind().dialect.name == "sqlite" else TsVector()


class FTS5:
    """SQLite: each word becomes an FTS5 string (a phrase of its tokens, tokenised like
    the text was), and the strings are ANDed (or ORed), so no operator or syntax error
    can come from what was typed."""

    async def prepare(self, session: AsyncSession) -> None:
        return None

    @staticmethod
    def _match(words: Sequence[str], any_word: bool = False) -> str:
        joint = " OR " if any_word else " AND "
        return joint.join('"' + word.replace('"', '""') + '"' for word in words)

    def matches(
        self, source: Source, words: Sequence[str], *, any_word: bool = False
    ) -> ColumnElement[bool]:
        match = literal(self._match(words, any_word))
        found: Select[Any] = (
            select(literal_column("rowid"))
            .select_from(table(source.fts))
            .where(literal_column(source.fts).op("MATCH")(match))
        )
        return source.id.in_(found)

    def scored(
        self, source: Source, words: Sequence[str], *, any_word: bool
    ) -> tuple[FromClause, list[ColumnElement[bool]], ColumnElement[float]]:
        # bm25 is an FTS5 function: the FTS table is read, joined to its rows, and the
        # match is what it scores.
        fts = table(source.fts, column("rowid"))
        joined = fts.join(source.table, source.id == fts.c.rowid)
        match = literal_column(source.fts).op("MATCH")(literal(self._match(words, any_word)))
        # bm25 is lower for a better match.
        return joined, [match], -func.bm25(literal_column(source.fts))

    async def details(
        self,
        session: AsyncSession,
        source: Source,
        words: Sequence[str],
        ids: list[int],
        *,
        any_word: bool = False,
        ranked: bool = True,
    ) -> dict[int, tuple[str, float]]:
        if not ids:
            return {}
        fts = source.fts
        rank = f"bm25({fts})" if ranked else "0.0"
        query = text(
            # Column -1: the snippet comes from whichever column matched best.
            f"SELECT rowid, snippet({fts}, -1, :start, :end, :ellipsis, :tokens), {rank} "
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


class TsVector:
    """Postgres: each word becomes a quoted phrase for `websearch_to_tsquery`, which
    never raises on its input; the phrases are ANDed (or ORed), like on SQLite.

    The planner costs `to_tsvector` of any text like a comparison. A transcript is tens
    of kilobytes, and the chunks table small (a conversation has a few hundred), so it
    would rather compute every transcript's vector (milliseconds each) than read the
    GIN index (microseconds, exact for plain words): the match of a transcript is
    fenced as a query of its own over the index's expression alone, and a search's
    transaction takes no sequential scans, which leaves the index the way there.
    """

    async def prepare(self, session: AsyncSession) -> None:
        await session.execute(text("SET LOCAL enable_seqscan = off"))

    @staticmethod
    def _query(words: Sequence[str], any_word: bool = False) -> ColumnElement[Any]:
        joint = " or " if any_word else " "
        phrases = joint.join('"' + word.replace('"', " ") + '"' for word in words)
        return func.websearch_to_tsquery(_SIMPLE, literal(phrases))

    def matches(
        self, source: Source, words: Sequence[str], *, any_word: bool = False
    ) -> ColumnElement[bool]:
        query = self._query(words, any_word)
        if source.kind is HitKind.MESSAGE:
            return func.to_tsvector(_SIMPLE, source.text).op("@@")(query)
        inner = source.table.alias(f"{source.kind.value}_found")
        vector = func.to_tsvector(_SIMPLE, inner.c[str(source.text.key)])
        # OFFSET 0: planned apart, not merged into the query around it.
        fenced = select(inner.c[source.id.key]).where(vector.op("@@")(query)).offset(0)
        return source.id.in_(fenced)

    def scored(
        self, source: Source, words: Sequence[str], *, any_word: bool
    ) -> tuple[FromClause, list[ColumnElement[bool]], ColumnElement[float]]:
        # The score weighs how often and how close together the words occur; it reads
        # each row's vector anew, so only rows known to match are scored.
        vector = func.to_tsvector(_SIMPLE, source.text)
        return source.table, [], func.ts_rank_cd(vector, self._query(words, any_word))

    async def details(
        self,
        session: AsyncSession,
        source: Source,
        words: Sequence[str],
        ids: list[int],
        *,
        any_word: bool = False,
        ranked: bool = True,
    ) -> dict[int, tuple[str, float]]:
        if not ids:
            return {}
        query = self._query(words, any_word)
        vector = func.to_tsvector(_SIMPLE, source.text)
        rank: ColumnElement[Any] = func.ts_rank(vector, query) if ranked else literal(0.0)
        rows = await session.execute(
            select(
                source.id, func.ts_headline(_SIMPLE, source.text, query, literal(_HEADLINE)), rank
            ).where(source.id.in_(ids))
        )
        return {row_id: (snippet, float(rank)) for row_id, snippet, rank in rows}


async def read_hits(
    session: AsyncSession,
    index: Index,
    words: Sequence[str],
    rows: Sequence[Any],
    *,
    any_word: bool = False,
    scored: bool = False,
) -> list[SearchHit]:
    """`rows` (read with `columns`, and with `scored` a `score`) as hits in their order,
    each with its snippet and rank (its score, or the index's); a row deleted since it
    was found is left out."""
    details = {
        source.kind: await index.details(
            session,
            source,
            words,
            [r.row_id for r in rows if r.kind == source.kind],
            any_word=any_word,
            ranked=not scored,
        )
        for source in SOURCES
    }
    hits = []
    for row in rows:
        kind = HitKind(row.kind)
        detail = details[kind].get(row.row_id)
        if detail is not None:
            snippet, rank = detail
            hits.append(hit(kind, row, snippet, float(row.score) if scored else rank))
    return hits
