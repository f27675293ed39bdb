"""The most relevant hits of one conversation, however old (the model's recall): by the
index's own score (FTS5 bm25, Postgres ts_rank_cd), each kind apart, with how many
match, and without the messages a caller leaves out."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, FromClause, exists, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from memory.storage.models import Chunk, Message
from memory.storage.search._hits import (
    MESSAGES_FTS,
    SOURCES,
    HitKind,
    SearchHit,
    Source,
    columns,
    time_of,
    within,
)
from memory.storage.search._index import Index, read_hits

# Matches of each kind are counted up to this many: past it, "at least".
COUNT_LIMIT = 1000


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


async def best_hits(
    session: AsyncSession,
    index: Index,
    conversation_id: uuid.UUID,
    words: Sequence[str],
    *,
    limit: int,
    start: datetime | None,
    end: datetime | None,
    any_word: bool,
    left_out: LeftOut | None,
) -> Ranked:
    """The `limit` best rows of each kind with the words (`any_word`: any of them), the
    newer first of equals, with their snippets."""
    found: dict[HitKind, tuple[list[SearchHit], int]] = {}
    for source in SOURCES:
        conditions = within(source, conversation_id, start, end)
        conditions += _keeping(index, source, words, any_word, left_out)
        rows, count = await _ranked(
            session, index.scored(source, words, any_word=any_word), source, conditions, limit
        )
        hits = await read_hits(session, index, words, rows, any_word=any_word, scored=True)
        found[source.kind] = (hits, count)
    (messages, message_count), (chunks, chunk_count) = found[HitKind.MESSAGE], found[HitKind.CHUNK]
    return Ranked(messages, chunks, message_count, chunk_count)


async def _ranked(
    session: AsyncSession,
    scored: tuple[tuple[FromClause, ColumnElement[bool]], ColumnElement[float]],
    source: Source,
    conditions: list[ColumnElement[bool]],
    limit: int,
) -> tuple[list[Any], int]:
    """The best `limit` rows of `source` that match and meet `conditions`, by score,
    and how many match (up to COUNT_LIMIT)."""
    (where, match), score = scored
    best = (
        select(*columns(source), score.label("score"))
        .select_from(where)
        .where(match, *conditions)
        .order_by(score.desc(), time_of(source).desc())
        .limit(limit)
    )
    rows = list(await session.execute(best))
    matching = select(literal(1)).select_from(where).where(match, *conditions)
    count = await session.scalar(
        select(func.count()).select_from(matching.limit(COUNT_LIMIT).subquery())
    )
    return rows, int(count or 0)


def _keeping(
    index: Index,
    source: Source,
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
    in_said = Source(HitKind.MESSAGE, MESSAGES_FTS, Message.__table__, said.id, said.text)

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
