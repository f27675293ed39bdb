"""Export: everything of a person as the lines of `format.py`, read a page at a time.

What goes: the person, their identities, their own conversation with every message
and chunk (transcripts and summaries, levels, seq ranges, parents), their profile
lines with evidence, their retired facts, the files sent with their messages (bytes
and all), and the reminders and follow-ups of their conversation with their firings. Their messages in group conversations
do not: a group's history is the group's, and would not go back into it (erasure
deletes them all the same).

The export covers what was stored when it began: the header's counts are taken first,
and every later read is bounded by them (messages up to the seq then, chunks and
retired facts up to the id then). A long history is never in memory: each query reads
one page, in its own short transaction.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased

from memory.portable.format import (
    ATTACHMENT,
    CHUNK,
    CONVERSATION,
    FORMAT,
    IDENTITY,
    MESSAGE,
    PROFILE_LINE,
    RETIRED_FACT,
    SCHEDULE,
    VERSION,
    encode,
    when,
)
from memory.storage.models import (
    Attachment,
    Chunk,
    Conversation,
    Identity,
    Message,
    Profile,
    RetiredFact,
    Schedule,
    ScheduleFire,
    User,
)

PAGE_SIZE = 500

# A query of any columns.
_Query = Select[*tuple[Any, ...]]


class NoSuchUser(LookupError):
    """There is no person with that id to export."""


@dataclass(frozen=True, slots=True)
class ExportCounts:
    identities: int
    conversations: int
    messages: int
    chunks: int
    transcripts: int
    profile_lines: int
    retired_facts: int
    schedules: int
    attachments: int


@dataclass(frozen=True, slots=True)
class _Bounds:
    """What the export covers: what was stored when it began."""

    conversation_id: uuid.UUID | None
    last_seq: int
    last_chunk: int
    last_retired: int
    last_schedule: int
    first_message: dict[str, Any] | None  # its seq and time: which history this is


class Exports:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], *, page_size: int = PAGE_SIZE
    ) -> None:
        self._sessions = sessions
        self._page = page_size
        # Transcripts make chunk rows large: fewer of them a page.
        self._chunk_page = max(1, page_size // 10)

    async def export_user(self, user_id: uuid.UUID, *, now: datetime) -> AsyncIterator[str]:
        """The person's lines, header first, each ending in a newline; `NoSuchUser`
        (raised by the first step, before any line) if there is no such person."""
        async with self._sessions() as session:
            user = await session.get(User, user_id)
            if user is None:
                raise NoSuchUser(f"no user {user_id}")
            bounds, counts = await _begin(session, user_id)
            identities = list(await session.execute(_identities(user_id)))
            conversation = (
                None
                if bounds.conversation_id is None
                else await session.get(Conversation, bounds.conversation_id)
            )
            profile = await session.get(Profile, user_id)
        yield encode(
            {
                "format": FORMAT,
                "version": VERSION,
                "exported_at": now.isoformat(),
                "user": _user(user),
                "counts": asdict(counts),
            }
        )
        for row in identities:
            yield encode(_identity(row))
        if conversation is not None:
            yield encode(_conversation(conversation, bounds))
            async for line in self._archive(bounds):
                yield line
        async for line in self._profile(profile, bounds):
            yield line
        async for line in self._retired(user_id, bounds):
            yield line
        async for line in self._schedules(bounds):
            yield line

    async def _archive(self, bounds: _Bounds) -> AsyncIterator[str]:
        conversation_id = bounds.conversation_id
        assert conversation_id is not None
        parent = aliased(Chunk)
        chunks = (
            select(Chunk, parent.level, parent.seq_start)
            .outerjoin(parent, parent.id == Chunk.parent_id)
            .where(Chunk.conversation_id == conversation_id, Chunk.id <= bounds.last_chunk)
        )
        after: tuple[int, int] | None = None
        while page := await self._read(_chunk_page(chunks, after, self._chunk_page)):
            for chunk, *parent_key in page:
                yield encode(_chunk(chunk, parent_key))
            after = (page[-1][0].level, page[-1][0].seq_start)
        seq = 0
        while page := await self._read(_message_page(conversation_id, seq, bounds, self._page)):
            for row in page:
                yield encode(_message(row))
            seq = page[-1][0].seq
        async for line in self._attachments(bounds):
            yield line

    async def _attachments(self, bounds: _Bounds) -> AsyncIterator[str]:
        """The files of the messages exported, each read (bytes and all) on its own: a
        file may be 20 MB, and only one is held at a time."""
        last = 0
        while ids := await self._read(_attachment_page(bounds, last, self._page)):
            for attachment_id, seq in ids:
                found = await self._read(select(Attachment).where(Attachment.id == attachment_id))
                if found:  # erased meanwhile: gone from the export too
                    yield encode(_attachment(found[0][0], seq))
            last = ids[-1][0]

    async def _profile(self, profile: Profile | None, bounds: _Bounds) -> AsyncIterator[str]:
        if profile is None or not profile.text:
            return
        evidence = json.loads(profile.evidence) if profile.evidence else []
        keys = await self._chunk_keys(bounds, _chunk_ids(evidence))
        for number, text in enumerate(profile.text.split("\n")):
            sources = evidence[number] if number < len(evidence) else None
            yield encode({"type": PROFILE_LINE, "text": text, "evidence": _keyed(sources, keys)})

    async def _retired(self, user_id: uuid.UUID, bounds: _Bounds) -> AsyncIterator[str]:
        last = 0
        while True:
            query = (
                select(RetiredFact)
                .where(
                    RetiredFact.user_id == user_id,
                    RetiredFact.id > last,
                    RetiredFact.id <= bounds.last_retired,
                )
                .order_by(RetiredFact.id)
                .limit(self._page)
            )
            page = [row[0] for row in await self._read(query)]
            if not page:
                return
            evidence = [json.loads(r.evidence) if r.evidence else None for r in page]
            keys = await self._chunk_keys(bounds, _chunk_ids(evidence))
            for fact, sources in zip(page, evidence, strict=True):
                yield encode(_retired(fact, _keyed(sources, keys)))
            last = page[-1].id

    async def _schedules(self, bounds: _Bounds) -> AsyncIterator[str]:
        """The conversation's reminders and follow-ups, each with its firings."""
        if bounds.conversation_id is None:
            return
        query = (
            select(Schedule)
            .where(
                Schedule.conversation_id == bounds.conversation_id,
                Schedule.id <= bounds.last_schedule,
            )
            .order_by(Schedule.id)
        )
        for (schedule,) in await self._read(query):
            fires = select(ScheduleFire).where(ScheduleFire.schedule_id == schedule.id)
            fired = [row[0] for row in await self._read(fires.order_by(ScheduleFire.due_at))]
            yield encode(_schedule(schedule, fired))

    async def _chunk_keys(self, bounds: _Bounds, ids: set[int]) -> dict[int, list[int]]:
        """Evidence names chunks by id: their (level, seq_start) instead, where the
        chunk is still in the conversation."""
        if not ids or bounds.conversation_id is None:
            return {}
        query = select(Chunk.id, Chunk.level, Chunk.seq_start).where(
            Chunk.conversation_id == bounds.conversation_id, Chunk.id.in_(ids)
        )
        return {row[0]: [row[1], row[2]] for row in await self._read(query)}

    async def _read(self, query: _Query) -> Sequence[Any]:
        async with self._sessions() as session:
            page: Sequence[Any] = (await session.execute(query)).all()
        return page


async def _begin(session: AsyncSession, user_id: uuid.UUID) -> tuple[_Bounds, ExportCounts]:
    """The export's bounds and counts, read in one go before any line is written."""
    conversation = (
        await session.execute(
            select(Conversation.id, Conversation.last_seq).where(Conversation.user_id == user_id)
        )
    ).one_or_none()
    conversation_id = None if conversation is None else conversation[0]
    last_seq = 0 if conversation is None else int(conversation[1])
    in_it = Message.conversation_id == conversation_id
    messages = await session.scalar(select(func.count()).where(in_it, Message.seq <= last_seq))
    first = (
        await session.execute(
            select(Message.seq, Message.created_at).where(in_it).order_by(Message.seq).limit(1)
        )
    ).one_or_none()
    chunks = (
        await session.execute(
            select(func.count(), func.count(Chunk.transcript), func.max(Chunk.id)).where(
                Chunk.conversation_id == conversation_id
            )
        )
    ).one()
    retired = (
        await session.execute(
            select(func.count(), func.max(RetiredFact.id)).where(RetiredFact.user_id == user_id)
        )
    ).one()
    schedules = (
        await session.execute(
            select(func.count(), func.max(Schedule.id)).where(
                Schedule.conversation_id == conversation_id
            )
        )
    ).one()
    attachments = await session.scalar(
        select(func.count())
        .select_from(Attachment)
        .join(Message, Message.id == Attachment.message_id)
        .where(in_it, Message.seq <= last_seq)
    )
    first_message = None if first is None else {"seq": first[0], "created_at": when(first[1])}
    bounds = _Bounds(
        conversation_id,
        last_seq,
        chunks[2] or 0,
        retired[1] or 0,
        schedules[1] or 0,
        first_message,
    )
    counts = ExportCounts(
        identities=await _identity_count(session, user_id),
        conversations=0 if conversation is None else 1,
        messages=int(messages or 0),
        chunks=int(chunks[0]),
        transcripts=int(chunks[1]),
        profile_lines=await _profile_lines(session, user_id),
        retired_facts=int(retired[0]),
        schedules=int(schedules[0]),
        attachments=int(attachments or 0),
    )
    return bounds, counts


async def _identity_count(session: AsyncSession, user_id: uuid.UUID) -> int:
    query = select(func.count()).select_from(Identity).where(Identity.user_id == user_id)
    return int(await session.scalar(query) or 0)


async def _profile_lines(session: AsyncSession, user_id: uuid.UUID) -> int:
    profile = await session.scalar(select(Profile.text).where(Profile.user_id == user_id))
    return len(profile.split("\n")) if profile else 0


# -- the queries, a page each ------------------------------------------------------------


def _identities(user_id: uuid.UUID) -> _Query:
    return (
        select(Identity.channel, Identity.external_id, Identity.display_name, Identity.created_at)
        .where(Identity.user_id == user_id)
        .order_by(Identity.created_at, Identity.channel, Identity.external_id)
    )


def _chunk_page(query: _Query, after: tuple[int, int] | None, size: int) -> _Query:
    """Highest level first, then by seq: every parent before its children."""
    if after is not None:
        level, seq_start = after
        query = query.where(
            or_(Chunk.level < level, and_(Chunk.level == level, Chunk.seq_start > seq_start))
        )
    return query.order_by(Chunk.level.desc(), Chunk.seq_start).limit(size)


def _message_page(conversation_id: uuid.UUID, after_seq: int, bounds: _Bounds, size: int) -> _Query:
    archived = aliased(Chunk)
    return (
        select(Message, Identity.channel, Identity.external_id, archived.seq_start)
        .outerjoin(Identity, Identity.id == Message.identity_id)
        .outerjoin(archived, archived.id == Message.chunk_id)
        .where(
            Message.conversation_id == conversation_id,
            Message.seq > after_seq,
            Message.seq <= bounds.last_seq,
        )
        .order_by(Message.seq)
        .limit(size)
    )


def _attachment_page(bounds: _Bounds, after_id: int, size: int) -> _Query:
    """The next files' ids and their messages' seqs (not their bytes)."""
    return (
        select(Attachment.id, Message.seq)
        .join(Message, Message.id == Attachment.message_id)
        .where(
            Message.conversation_id == bounds.conversation_id,
            Message.seq <= bounds.last_seq,
            Attachment.id > after_id,
        )
        .order_by(Attachment.id)
        .limit(size)
    )


# -- the records -------------------------------------------------------------------------


def _user(user: User) -> dict[str, Any]:
    return {
        "id": str(user.id),
        "display_name": user.display_name,
        "timezone": user.timezone,
        "created_at": when(user.created_at),
    }


def _identity(row: Any) -> dict[str, Any]:
    channel, external_id, display_name, created_at = row
    return {
        "type": IDENTITY,
        "channel": channel,
        "external_id": external_id,
        "display_name": display_name,
        "created_at": when(created_at),
    }


def _conversation(conversation: Conversation, bounds: _Bounds) -> dict[str, Any]:
    last_seq = bounds.last_seq
    return {
        "type": CONVERSATION,
        "kind": conversation.kind.value,
        "title": conversation.title,
        "created_at": when(conversation.created_at),
        "last_message_at": when(conversation.last_message_at),
        "last_seq": last_seq,
        "last_user_seq": min(conversation.last_user_seq, last_seq),
        "answered_seq": min(conversation.answered_seq, last_seq),
        "first_message": bounds.first_message,
    }


def _chunk(chunk: Chunk, parent_key: list[int | None]) -> dict[str, Any]:
    return {
        "type": CHUNK,
        "level": chunk.level,
        "seq_start": chunk.seq_start,
        "seq_end": chunk.seq_end,
        "time_start": when(chunk.time_start),
        "time_end": when(chunk.time_end),
        "parent": None if parent_key[0] is None else parent_key,
        "status": chunk.status.value,
        "attempts": chunk.attempts,
        "last_error": chunk.last_error,
        "in_timeline": chunk.in_timeline,
        "facts_extracted": chunk.facts_extracted,
        "created_at": when(chunk.created_at),
        "updated_at": when(chunk.updated_at),
        "summary": chunk.summary,
        "transcript": chunk.transcript,
    }


def _message(row: Any) -> dict[str, Any]:
    message, channel, external_id, chunk_start = row
    return {
        "type": MESSAGE,
        "seq": message.seq,
        "role": message.role.value,
        "channel": message.channel,
        "author": None if channel is None else [channel, external_id],
        "author_name": message.author_name,
        "source": message.source,
        "platform_message_id": message.platform_message_id,
        "platform_ts": when(message.platform_ts),
        "created_at": when(message.created_at),
        "token_count": message.token_count,
        # Only level-0 chunks hold messages (once their summary is in the timeline).
        "chunk": None if chunk_start is None else [0, chunk_start],
        "reply_to_seq": message.reply_to_seq,
        "delivery": None if message.delivery is None else message.delivery.value,
        "delivery_attempts": message.delivery_attempts,
        "delivery_error": message.delivery_error,
        "model": message.model,
        "usage_prompt": message.usage_prompt,
        "usage_cached": message.usage_cached,
        "usage_completion": message.usage_completion,
        "media": message.media,
        "text": message.text,
    }


def _attachment(attachment: Attachment, seq: int) -> dict[str, Any]:
    return {
        "type": ATTACHMENT,
        "seq": seq,
        "kind": attachment.kind.value,
        "state": attachment.state.value,
        "mime": attachment.mime,
        "file_name": attachment.file_name,
        "width": attachment.width,
        "height": attachment.height,
        "duration": attachment.duration,
        "text": attachment.text,
        "created_at": when(attachment.created_at),
        "sha256": attachment.sha256 or None,
        "data": base64.b64encode(attachment.data).decode("ascii"),
    }


def _retired(fact: RetiredFact, evidence: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {
        "type": RETIRED_FACT,
        "text": fact.text,
        "reason": fact.reason,
        "profile_revision": fact.profile_revision,
        "retired_at": when(fact.retired_at),
        "evidence": evidence,
    }


def _schedule(schedule: Schedule, fires: list[ScheduleFire]) -> dict[str, Any]:
    return {
        "type": SCHEDULE,
        "kind": schedule.kind.value,
        "text": schedule.text,
        # Wall-clock times in `zone`, without an offset (YYYY-MM-DDTHH:MM:SS).
        "starts_local": schedule.starts_local,
        "zone": schedule.zone,
        "repeat": schedule.repeat,
        "channel": schedule.channel,
        "created_by": schedule.created_by,
        "created_at": when(schedule.created_at),
        "state": schedule.state.value,
        "next_local": schedule.next_local,
        "next_due_at": when(schedule.next_due_at),
        "fires": [
            {
                "due_at": when(fire.due_at),
                "fired_at": when(fire.fired_at),
                "outcome": fire.outcome.value,
                "missed": fire.missed,
                "detail": fire.detail,
            }
            for fire in fires
        ],
    }


def _chunk_ids(evidence: list[Any]) -> set[int]:
    """Chunk ids named by evidence: a list (per line or fact) of lists of sources."""
    return {int(source["chunk"]) for sources in evidence for source in sources or ()}


def _keyed(
    sources: list[dict[str, Any]] | None, keys: dict[int, list[int]]
) -> list[dict[str, Any]] | None:
    """Evidence (memory.profile.Evidence as JSON) with its chunk named by key; null
    where that chunk is gone (a merge re-cuts the archive): the seqs and time stay."""
    if sources is None:
        return None
    return [source | {"chunk": keys.get(int(source["chunk"]))} for source in sources]
