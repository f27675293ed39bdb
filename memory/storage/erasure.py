"""Deleting a conversation, and erasing a person: every row, transcript file, queued
job and delivery of theirs, in one transaction.

A person is their user row, identities, profile, retired facts, pairing requests, link
codes, their own conversation with everything in it, and every message they typed
elsewhere (a group; a conversation that kept an unlinked identity's history). The rest
of such a conversation stays, replies included (but not one to them still unsent). Its
archive is cut back to before their first message there, so no transcript or summary
keeps their words: the chunks from there on go, their messages are live again, and the
archiver cuts and summarises them anew.

Jobs are rows (chunks with status and lease, profiles): deleting the rows deletes the
work, and a job still in a queue finds nothing and returns. A turn running meanwhile
fails on its next write (its conversation is gone: it stores nothing, and its loop logs
once and ends); one transaction leaves no half state. The gateway holds the
conversation's turns (`TurnRunner.guard`) around a delete, so that no transcript file
is written for a chunk cut just before.

On SQLite, erased text is overwritten rather than left in free pages (`secure_delete`,
on for every connection: see engine.py); the full-text index is compacted and the
write-ahead log emptied into the database file after each erasure.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import structlog
from sqlalchemy import (
    ColumnElement,
    CursorResult,
    String,
    and_,
    case,
    delete,
    exists,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy import cast as cast_to
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased

from memory.storage.conversations import personal_conversation
from memory.storage.live_window import bump_live_version
from memory.storage.models import (
    Chunk,
    ChunkStatus,
    Conversation,
    ConversationKind,
    Delivery,
    IdempotentRequest,
    Identity,
    LinkCode,
    Lookup,
    Message,
    PairingRequest,
    Profile,
    ProfileChange,
    RetiredFact,
    Role,
    Schedule,
    ScheduleFire,
    SentPart,
    UsageDay,
    User,
    Watermark,
)
from memory.storage.search import Search

log = structlog.get_logger(__name__)

# Replies not taken by the platform: waiting, or given up on (an operator may retry).
_UNDELIVERED = (Delivery.PENDING, Delivery.FAILED)


@dataclass(frozen=True, slots=True)
class DeletedCounts:
    """What went with a conversation (or with a person's part of one)."""

    messages: int = 0
    chunks: int = 0
    transcripts: int = 0  # chunks that held a verbatim transcript
    transcript_files: int = 0
    # Archive work that was waiting: chunks to summarise (pending or failed) and
    # level-0 chunks whose facts were not taken yet.
    jobs: int = 0
    # Replies not delivered (pending or failed), and parts of replies the platforms took.
    deliveries: int = 0

    def __add__(self, other: DeletedCounts) -> DeletedCounts:
        return DeletedCounts(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(DeletedCounts))
        )


@dataclass(frozen=True, slots=True)
class ErasedCounts(DeletedCounts):
    """What went with a person: their part of every conversation, and what was theirs."""

    identities: int = 0
    profile_lines: int = 0
    retired_facts: int = 0


# Transcript files to remove: a conversation's, or (None) all of its chunks'.
_Files = tuple[uuid.UUID, frozenset[int] | None]


class Erasure:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], *, archive_dir: Path | None
    ) -> None:
        """`archive_dir` holds the transcript files (`<archive_dir>/<conversation>/`, as
        memory.archive.transcript lays them out); None where none are written."""
        self._sessions = sessions
        self._archive_dir = archive_dir

    async def delete_conversation(
        self, conversation_id: uuid.UUID, *, now: datetime
    ) -> DeletedCounts | None:
        """Delete the conversation with everything in it; None if there is none.

        A person's own conversation is replaced by an empty one (created `now`): they
        stay, and their next message starts afresh. Their profile stays too (erasing
        the person is `erase_user`)."""
        async with self._sessions() as session:
            conversation = await session.get(Conversation, conversation_id)
            if conversation is None:
                return None
            owner, title = conversation.user_id, conversation.title
            personal = conversation.kind == ConversationKind.PERSONAL
            counts = await _drop_conversation(session, conversation)
            await _forget_answers(session, [conversation_id])
            if personal and owner is not None:
                session.add(personal_conversation(owner, title, now))
            # Files first: if the commit then fails, only copies of rows that stay are
            # gone; the other way round, a failed removal could never be retried.
            removed = await self._remove_files([(conversation_id, None)])
            await session.commit()
        await self._scrub()
        return replace(counts, transcript_files=removed)

    async def erase_user(self, user_id: uuid.UUID) -> ErasedCounts | None:
        """Erase the person and everything of theirs; None if there is no such person."""
        async with self._sessions() as session:
            if await session.get(User, user_id) is None:
                return None
            identities = list(
                await session.scalars(select(Identity.id).where(Identity.user_id == user_id))
            )
            own = await session.scalar(select(Conversation).where(Conversation.user_id == user_id))
            counts, files = await _drop_typed_elsewhere(
                session, identities, None if own is None else own.id
            )
            if own is not None:
                counts += await _drop_conversation(session, own)
                files.append((own.id, None))
            personal = await _drop_person(session, user_id)
            await _forget_answers(session, [user_id, *([] if own is None else [own.id])])
            removed = await self._remove_files(files)
            await session.commit()
        await self._scrub()
        return ErasedCounts(**(asdict(counts) | personal | {"transcript_files": removed}))

    async def _remove_files(self, files: Sequence[_Files]) -> int:
        if self._archive_dir is None:
            return 0
        return await asyncio.to_thread(_remove_transcripts, self._archive_dir, files)

    async def _scrub(self) -> None:
        """After an erasing commit: drop the erased words from the full-text index; on
        SQLite, then move the write-ahead log (which holds pages as they were written,
        erased text and all) into the database file and truncate it."""
        await Search(self._sessions).compact()
        async with self._sessions() as session:
            if session.get_bind().dialect.name != "sqlite":
                return
            busy, _, _ = (await session.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))).one()
        if busy:  # a reader held it past the busy timeout: the log is reused from its start
            log.warning("after an erasure, the write-ahead log could not be truncated")


# -- the statements ---------------------------------------------------------------------


async def _drop_conversation(session: AsyncSession, conversation: Conversation) -> DeletedCounts:
    """Delete a conversation's rows (and the watermarks of its chats)."""
    counts = await _chunk_counts(session, Chunk.conversation_id == conversation.id)
    await _forget_watermarks(session, conversation)
    await _run(session, delete(Lookup).where(Lookup.conversation_id == conversation.id))
    # Reminders say what the person asked for, in their words: they go with it.
    schedules = select(Schedule.id).where(Schedule.conversation_id == conversation.id)
    await _run(session, delete(ScheduleFire).where(ScheduleFire.schedule_id.in_(schedules)))
    await _run(session, delete(Schedule).where(Schedule.conversation_id == conversation.id))
    counts += await _drop_messages(session, Message.conversation_id == conversation.id)
    await _run(session, delete(Chunk).where(Chunk.conversation_id == conversation.id))
    # A group's model usage is charged to it (a person's, to the person).
    await _run(session, delete(UsageDay).where(UsageDay.subject == conversation.id))
    await _run(session, delete(Conversation).where(Conversation.id == conversation.id))
    return counts


async def _drop_typed_elsewhere(
    session: AsyncSession, identities: Sequence[uuid.UUID], own: uuid.UUID | None
) -> tuple[DeletedCounts, list[_Files]]:
    """Delete what the person typed in conversations not their own, and what was built
    from it there. Only typed messages (role user) are theirs: an operator's message
    names its addressee in `identity_id` too, and is the conversation's."""
    counts, files = DeletedCounts(), list[_Files]()
    if not identities:
        return counts, files
    found = (
        select(Message.conversation_id, func.min(Message.seq))
        .where(_typed_by(Message, identities))
        .group_by(Message.conversation_id)
    )
    if own is not None:
        found = found.where(Message.conversation_id != own)
    for conversation_id, first in (await session.execute(found)).all():
        archive, chunk_ids = await _cut_back_archive(session, conversation_id, first)
        counts += archive + await _drop_typed(session, conversation_id, identities)
        files.append((conversation_id, chunk_ids))
        # Messages came back into its live window and others left it.
        await _run(session, bump_live_version([conversation_id]))
    return counts, files


def _typed_by(table: Any, identities: Sequence[uuid.UUID]) -> ColumnElement[bool]:
    return and_(table.role == Role.USER, table.identity_id.in_(identities))


async def _cut_back_archive(
    session: AsyncSession, conversation_id: uuid.UUID, first_seq: int
) -> tuple[DeletedCounts, frozenset[int]]:
    """Delete every chunk reaching `first_seq` or later, at any level. A parent ends at
    or after its children, so what stays is a whole archive of what came before; the
    next cut starts after the newest chunk that stayed."""
    going = and_(Chunk.conversation_id == conversation_id, Chunk.seq_end >= first_seq)
    counts = await _chunk_counts(session, going)
    with_files = frozenset(
        await session.scalars(select(Chunk.id).where(going, Chunk.transcript.is_not(None)))
    )
    going_chunk = aliased(Chunk)  # not correlated with the chunks being updated
    going_ids = select(going_chunk.id).where(
        going_chunk.conversation_id == conversation_id, going_chunk.seq_end >= first_seq
    )
    for table, column in ((Message, Message.chunk_id), (Chunk, Chunk.parent_id)):
        # Messages that were archived by them, and children that stay, let go of them.
        stays = and_(table.conversation_id == conversation_id, column.in_(going_ids))
        await _run(session, update(table).where(stays).values({column: None}))
    await _run(session, delete(Chunk).where(going))
    return counts, with_files


async def _drop_typed(
    session: AsyncSession, conversation_id: uuid.UUID, identities: Sequence[uuid.UUID]
) -> DeletedCounts:
    """Delete the person's messages in another's conversation, and the replies to them
    still waiting to be sent (sent ones stay: they are the conversation's)."""
    theirs = aliased(Message)
    their_seqs = select(theirs.seq).where(
        theirs.conversation_id == conversation_id, _typed_by(theirs, identities)
    )
    going = and_(
        Message.conversation_id == conversation_id,
        or_(
            _typed_by(Message, identities),
            and_(Message.delivery == Delivery.PENDING, Message.reply_to_seq.in_(their_seqs)),
        ),
    )
    counts = await _drop_messages(session, going)
    # What the model read back in this conversation may quote them: lookups are a record
    # of reads, not of anything said, so all of them go.
    await _run(session, delete(Lookup).where(Lookup.conversation_id == conversation_id))
    # If their message was the newest unanswered one, nothing is owed any more.
    newest_user = select(func.coalesce(func.max(Message.seq), 0)).where(
        Message.conversation_id == conversation_id, Message.role == Role.USER
    )
    await _run(
        session,
        update(Conversation)
        .where(Conversation.id == conversation_id)
        .values(last_user_seq=newest_user.scalar_subquery()),
    )
    return counts


async def _drop_messages(session: AsyncSession, which: ColumnElement[bool]) -> DeletedCounts:
    """Delete the messages `which` with the parts sent of them."""
    deliveries = await _delivery_count(session, which)
    sent = SentPart.message_id.in_(select(Message.id).where(which))
    await _run(session, delete(SentPart).where(sent))
    return DeletedCounts(
        messages=await _run(session, delete(Message).where(which)), deliveries=deliveries
    )


async def _forget_answers(session: AsyncSession, subjects: Sequence[uuid.UUID]) -> None:
    """Answers kept for idempotent replays that are about what is erased."""
    await _run(session, delete(IdempotentRequest).where(IdempotentRequest.subject.in_(subjects)))


async def _drop_person(session: AsyncSession, user_id: uuid.UUID) -> dict[str, int]:
    """Delete what is the person's alone; the counts `ErasedCounts` adds."""
    identities = select(Identity.id).where(Identity.user_id == user_id)
    asked = exists().where(
        Identity.user_id == user_id,
        Identity.channel == PairingRequest.channel,
        Identity.external_id == PairingRequest.external_id,
    )
    await _run(session, delete(PairingRequest).where(asked))
    await _run(
        session,
        delete(LinkCode).where(
            or_(LinkCode.user_id == user_id, LinkCode.identity_id.in_(identities))
        ),
    )
    profile = await session.scalar(select(Profile.text).where(Profile.user_id == user_id))
    await _run(session, delete(Profile).where(Profile.user_id == user_id))
    await _run(session, delete(ProfileChange).where(ProfileChange.user_id == user_id))
    retired = await _run(session, delete(RetiredFact).where(RetiredFact.user_id == user_id))
    removed = await _run(session, delete(Identity).where(Identity.user_id == user_id))
    await _run(session, delete(UsageDay).where(UsageDay.subject == user_id))
    await _run(session, delete(User).where(User.id == user_id))
    lines = len(profile.split("\n")) if profile else 0
    return {"identities": removed, "profile_lines": lines, "retired_facts": retired}


async def _forget_watermarks(session: AsyncSession, conversation: Conversation) -> None:
    """A group's chat is its (channel, group id). A direct chat is recognised by what it
    was read up to: a message of this conversation or a part of one of its replies
    (Discord's ids are unique platform-wide). One read up to nothing stored here stays:
    it names a chat, not what was said in it."""
    if conversation.kind == ConversationKind.GROUP and conversation.group_id is not None:
        await _run(
            session,
            delete(Watermark).where(
                Watermark.channel == conversation.channel,
                Watermark.place == conversation.group_id,
            ),
        )
    position = cast_to(Watermark.position, String)
    here = Message.conversation_id == conversation.id
    read_to_message = exists().where(
        here, Message.channel == Watermark.channel, Message.platform_message_id == position
    )
    read_to_part = exists().where(
        here,
        SentPart.message_id == Message.id,
        SentPart.channel == Watermark.channel,
        SentPart.platform_message_id == position,
    )
    await _run(
        session,
        delete(Watermark).where(Watermark.private.is_(True), or_(read_to_message, read_to_part)),
    )


# -- counting ---------------------------------------------------------------------------


async def _chunk_counts(session: AsyncSession, which: ColumnElement[bool]) -> DeletedCounts:
    """The chunks `which`: how many, how many hold a transcript, how many wait for work."""
    waiting = or_(
        Chunk.status != ChunkStatus.READY,
        and_(Chunk.level == 0, Chunk.facts_extracted.is_(False)),
    )
    row = (
        await session.execute(
            select(
                func.count(),
                func.count(Chunk.transcript),
                func.coalesce(func.sum(case((waiting, 1), else_=0)), 0),
            ).where(which)
        )
    ).one()
    return DeletedCounts(chunks=int(row[0]), transcripts=int(row[1]), jobs=int(row[2]))


async def _delivery_count(session: AsyncSession, which: ColumnElement[bool]) -> int:
    """Undelivered replies among the messages `which`, and the parts sent of them all."""
    undelivered = select(func.count()).where(which, Message.delivery.in_(_UNDELIVERED))
    parts = select(func.count()).select_from(SentPart).join(Message).where(which)
    return sum([int(await session.scalar(query) or 0) for query in (undelivered, parts)])


async def _run(session: AsyncSession, statement: Any) -> int:
    """Execute a bulk UPDATE or DELETE; the rows it touched. The session holds none of
    these rows, so it is not asked to find them (that would read every deleted id)."""
    result = await session.execute(statement.execution_options(synchronize_session=False))
    return int(cast(CursorResult[Any], result).rowcount)


# -- files ------------------------------------------------------------------------------


def _remove_transcripts(archive_dir: Path, files: Iterable[_Files]) -> int:
    """Remove transcript files; how many there were."""
    removed = 0
    for conversation_id, chunk_ids in files:
        directory = archive_dir / str(conversation_id)
        paths = [p for p in directory.rglob("*") if p.is_file()] if directory.is_dir() else []
        going = [p for p in paths if chunk_ids is None or _chunk_of(p.name) in chunk_ids]
        for path in going:
            path.unlink()
        if chunk_ids is None and directory.is_dir():
            shutil.rmtree(directory)
        removed += len(going)
    return removed


def _chunk_of(name: str) -> int | None:
    """The chunk id in a transcript file's name (`<date>-chunk-<id>.txt`)."""
    stem, _, number = name.removesuffix(".txt").rpartition("-chunk-")
    return int(number) if stem and number.isdigit() else None
