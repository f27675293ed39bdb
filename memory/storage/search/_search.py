"""Search over one conversation, as the REST API and the model's recall ask for it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, text, union_all
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import InstrumentedAttribute

from memory.storage.models import Chunk, Message
from memory.storage.search._hits import (
    CHUNKS,
    FTS_TABLES,
    MESSAGES,
    HitKind,
    SearchHit,
    SearchPosition,
    checked_words,
    columns,
    search_words,
    within,
)
from memory.storage.search._index import Index, index_for, read_hits
from memory.storage.search._ranked import LeftOut, Ranked, best_hits


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
        words = checked_words(query, limit, start, end)
        if not words:
            return []
        async with self._sessions() as session:
            index = index_for(session)
            await index.prepare(session)
            page = _page(index, conversation_id, words, limit, start, end, after)
            rows = (await session.execute(page)).all()
            return await read_hits(session, index, words, rows)

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
        any but those said in most messages), as `search` finds them, whatever their
        age, of the newest `RANKED` matches of each kind; the newer first of equals.
        Without the messages `left_out` names."""
        words = checked_words(query, limit, start, end)
        if not words:
            return Ranked([], [], 0, 0)
        async with self._sessions() as session:
            index = index_for(session)
            await index.prepare(session)
            return await best_hits(
                session,
                index,
                conversation_id,
                words,
                limit=limit,
                start=start,
                end=end,
                any_word=any_word,
                left_out=left_out,
            )

    async def conversations_with(self, query: str, *, limit: int) -> list[uuid.UUID]:
        """Conversations any of whose messages or transcripts has every word of `query`,
        most recently active first (finding a person by something they said)."""
        words = search_words(query)
        if not words:
            return []
        async with self._sessions() as session:
            index = index_for(session)
            await index.prepare(session)
            said = select(
                Message.conversation_id.label("id"), Message.created_at.label("at")
            ).where(index.matches(MESSAGES, words))
            archived = select(Chunk.conversation_id.label("id"), Chunk.time_end.label("at")).where(
                Chunk.level == 0, Chunk.transcript.is_not(None), index.matches(CHUNKS, words)
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
            for fts in FTS_TABLES:
                await session.execute(text(f"INSERT INTO {fts}({fts}) VALUES ('optimize')"))
            await session.commit()


def _page(
    index: Index,
    conversation_id: uuid.UUID,
    words: Sequence[str],
    limit: int,
    start: datetime | None,
    end: datetime | None,
    after: SearchPosition | None,
) -> Select[Any]:
    """The page's hits (kind, key, row id, time, seq range), without snippets: those
    cost, so they are made for the page only."""
    messages = select(*columns(MESSAGES)).where(
        *within(MESSAGES, conversation_id, start, end),
        index.matches(MESSAGES, words),
        *_after(HitKind.MESSAGE, Message.created_at, Message.seq, after),
    )
    chunks = select(*columns(CHUNKS)).where(
        *within(CHUNKS, conversation_id, start, end),
        index.matches(CHUNKS, words),
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
