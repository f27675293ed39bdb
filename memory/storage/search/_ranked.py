"""The most relevant hits of one conversation (the model's recall): by the index's own
score (FTS5 bm25, Postgres ts_rank_cd), each kind apart, with how many match, and
without the messages a caller leaves out.

Scoring reads each row's words anew (Postgres has no stored vectors), so it is kept to
a bounded set: the newest `RANKED[kind]` matches of a kind, found through the index,
are scored, and counted. A word said in every other message matches thousands of them
and ranks none usefully; the any-word fallback leaves such words out (`common_words`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute, aliased

from memory.storage.models import Chunk, Message
from memory.storage.search._hits import (
    MESSAGES,
    MESSAGES_FTS,
    SOURCES,
    HitKind,
    SearchHit,
    Source,
    columns,
    searched,
    within,
)
from memory.storage.search._index import Index, read_hits

# The newest matches of each kind that are scored: the best are found among them, and
# a count that reached this says "at least". A message is a few words; a transcript
# is a chunk's every message, and costs as much to score as hundreds of them.
RANKED = {HitKind.MESSAGE: 1000, HitKind.CHUNK: 32}
# A word said in more than this share of the conversation's newest COMMON_SAMPLE
# messages is everyday talk: the any-word fallback does not search for it alone.
COMMON_SHARE = 0.5
COMMON_SAMPLE = 200


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
    kind match (at most `RANKED` of the kind: a count that reached it means at least
    that). `common`: the words an any-word search left out, as said in most messages."""

    messages: list[SearchHit]
    chunks: list[SearchHit]
    message_count: int
    chunk_count: int
    common: tuple[str, ...] = ()


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
    """The `limit` best rows of each kind with the words (`any_word`: any of them but
    the common ones), the newer first of equals, with their snippets."""
    common: tuple[str, ...] = ()
    if any_word and len(words) > 1:
        common = await common_words(session, index, conversation_id, words)
        words = [word for word in words if word not in common]
        if not words:
            return Ranked([], [], 0, 0, common)
    found: dict[HitKind, tuple[list[SearchHit], int]] = {}
    for source in SOURCES:
        conditions = within(source, conversation_id, start, end)
        conditions += _keeping(index, source, words, any_word, left_out)
        rows = await _ranked(session, index, source, words, any_word, conditions, limit)
        hits = await read_hits(session, index, words, rows, any_word=any_word, scored=True)
        found[source.kind] = (hits, rows[0].matching if rows else 0)
    (messages, message_count), (chunks, chunk_count) = found[HitKind.MESSAGE], found[HitKind.CHUNK]
    return Ranked(messages, chunks, message_count, chunk_count, common)


async def common_words(
    session: AsyncSession, index: Index, conversation_id: uuid.UUID, words: Sequence[str]
) -> tuple[str, ...]:
    """Which of `words` are said in more than COMMON_SHARE of the conversation's newest
    messages (none in a conversation of fewer than COMMON_SAMPLE)."""
    recent = (
        select(Message.id)
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.seq.desc())
        .limit(COMMON_SAMPLE)
        .subquery()
    )
    counts = select(
        func.count(),
        *(func.count().filter(index.matches(MESSAGES, [word])) for word in words),
    ).where(Message.id.in_(select(recent.c.id)))
    sampled, *said = (await session.execute(counts)).one()
    if sampled < COMMON_SAMPLE:
        return ()
    return tuple(word for word, n in zip(words, said, strict=True) if n > COMMON_SHARE * sampled)


async def _ranked(
    session: AsyncSession,
    index: Index,
    source: Source,
    words: Sequence[str],
    any_word: bool,
    conditions: list[ColumnElement[bool]],
    limit: int,
) -> list[Any]:
    """The best `limit` rows of `source` among its newest RANKED that match and meet
    `conditions`, by score; each with how many there are (`matching`)."""
    newest = (
        select(source.id)
        .where(index.matches(source, words, any_word=any_word), *conditions)
        .order_by(_newest(source).desc())
        .limit(RANKED[source.kind])
    )
    where, scoring, score = index.scored(source, words, any_word=any_word)
    # Scored in a query of their own: FTS5 computes bm25 only where its match is read,
    # never beside a window.
    scored = (
        select(*columns(source), score.label("score"))
        .select_from(where)
        .where(*scoring, source.id.in_(newest))
        .subquery()
    )
    best = (
        select(scored, func.count().over().label("matching"))
        .order_by(scored.c.score.desc(), scored.c.time.desc())
        .limit(limit)
    )
    return list(await session.execute(best))


def _newest(source: Source) -> InstrumentedAttribute[int]:
    # In the order of the indexes that lead with the conversation: a planner can read
    # them backwards and stop at the cap.
    return Message.seq if source.kind is HitKind.MESSAGE else Chunk.seq_start


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
    in_said = Source(HitKind.MESSAGE, MESSAGES_FTS, Message.__table__, said.id, searched(said))

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
