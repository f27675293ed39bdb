"""The database side of one import: rows matched by their natural keys (see
imports.py), the others inserted, a page at a time, and what happened counted.

Everything goes through one session, in one transaction the caller commits when the
whole file has been read: a file refused at any line leaves nothing behind."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, insert, or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession

from memory.portable import owner, rows
from memory.portable.format import AuthorKey, ChunkKey
from memory.storage import profile_rows
from memory.storage.conversations import personal_conversation
from memory.storage.inserts import insert_or_skip
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

# Who changed a profile, as its change log says.
IMPORTED_BY = "operator: import"


@dataclass(frozen=True, slots=True)
class Tally:
    created: int = 0
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class ImportCounts:
    user_id: uuid.UUID
    user_created: bool
    identities: Tally
    chunks: Tally
    messages: Tally
    profile_lines: Tally
    retired_facts: Tally
    schedules: Tally
    attachments: Tally
    transcript_files: int  # written under the archive directory
    # Rows of the file not imported because this database holds something else there.
    conflicts: int


class _Counter:
    def __init__(self) -> None:
        self.created = 0
        self.skipped = 0

    def add(self, created: bool) -> None:
        if created:
            self.created += 1
        else:
            self.skipped += 1


class Tables:
    def __init__(self, session: AsyncSession, person: rows.Person, now: datetime) -> None:
        """`session`: the import's transaction, never committed here."""
        self._session = session
        self._person = person
        self._now = now
        self._user_id: uuid.UUID | None = None
        self._user_created = False
        self.conversation_id: uuid.UUID | None = None
        self._chunk_ids: dict[ChunkKey, int] = {}
        self._authors: dict[AuthorKey, uuid.UUID | None] = {}
        self._max_seq = 0
        self._counts = {
            name: _Counter()
            for name in (
                "identities",
                "chunks",
                "messages",
                "profile_lines",
                "retired_facts",
                "schedules",
                "attachments",
            )
        }
        self._conflicts = 0

    @property
    def user_id(self) -> uuid.UUID:
        assert self._user_id is not None, "the person is settled before any row is theirs"
        return self._user_id

    def counts(self) -> ImportCounts:
        """What was imported; transcript files are written once it is committed."""
        return ImportCounts(
            user_id=self.user_id,
            user_created=self._user_created,
            **{name: Tally(c.created, c.skipped) for name, c in self._counts.items()},
            transcript_files=0,
            conflicts=self._conflicts,
        )

    @property
    def settled(self) -> bool:
        return self._user_id is not None

    async def settle(
        self, identities: Sequence[rows.IdentityRow], conversation: rows.ConversationRow | None
    ) -> None:
        """Whose the import is (`owner`: the person here the file shows it belongs to,
        or a new one); then the identities and the conversation they do not have yet.
        `ImportConflict`, before anything is written, if the file names someone here
        without showing it is their history."""
        keys = [row.key for row in identities]
        session = self._session
        found = await self._identities(keys)
        user_id = await owner.owner(session, {k: v[1] for k, v in found.items()}, conversation)
        if user_id is None:
            user_id, self._user_created = await self._new_person(), True
        for row in identities:
            await self._add_identity(row, row.key in found, user_id)
        mine = await self._identities(keys)
        owner.ensure_theirs(keys, {k: v[1] for k, v in mine.items()}, user_id)
        if conversation is not None:
            self.conversation_id = await _own_conversation(session, user_id, conversation)
        await session.flush()
        self._authors |= {k: v[0] for k, v in mine.items()}
        self._user_id = user_id

    async def _new_person(self) -> uuid.UUID:
        session = self._session
        user = User(
            display_name=self._person.display_name,
            timezone=self._person.timezone,
            created_at=self._person.created_at,
        )
        session.add(user)
        await session.flush()
        return user.id

    async def _add_identity(self, row: rows.IdentityRow, here: bool, user_id: uuid.UUID) -> None:
        """The identity, unless it is here already (then it is the person's: `owner`)."""
        if here:
            self._counts["identities"].add(False)
            return
        created = await self._session.scalar(
            insert_or_skip(self._session, Identity)
            .values(
                channel=row.key[0],
                external_id=row.key[1],
                user_id=user_id,
                display_name=row.display_name,
                created_at=row.created_at,
            )
            .returning(Identity.id)
        )
        self._counts["identities"].add(created is not None)

    async def _identities(
        self, keys: Sequence[AuthorKey]
    ) -> dict[AuthorKey, tuple[uuid.UUID, uuid.UUID]]:
        """(identity id, user id) of each of these identities that exists here."""
        if not keys:
            return {}
        query = select(Identity.channel, Identity.external_id, Identity.id, Identity.user_id).where(
            tuple_(Identity.channel, Identity.external_id).in_(keys)
        )
        return {(r[0], r[1]): (r[2], r[3]) for r in await self._session.execute(query)}

    async def chunks(self, batch: Sequence[rows.ChunkRow]) -> list[int]:
        """Insert the chunks not here yet; the ids of the level-0 ones inserted with a
        transcript (their files are to be written)."""
        written = []
        session = self._session
        for chunk in batch:
            # Parents come first; one the export did not have leaves a root here,
            # which the next roll-up takes up again.
            parent = None if chunk.parent is None else self._chunk_ids.get(chunk.parent)
            new_id = await session.scalar(
                insert_or_skip(session, Chunk)
                .values(conversation_id=self.conversation_id, parent_id=parent, **chunk.values)
                .returning(Chunk.id)
            )
            self._counts["chunks"].add(new_id is not None)
            if new_id is None:
                new_id = await session.scalar(
                    select(Chunk.id).where(
                        Chunk.conversation_id == self.conversation_id,
                        Chunk.level == chunk.key[0],
                        Chunk.seq_start == chunk.key[1],
                    )
                )
            elif chunk.key[0] == 0 and chunk.transcript is not None:
                written.append(new_id)
            if new_id is not None:
                self._chunk_ids[chunk.key] = new_id
        await session.flush()
        return written

    async def messages(self, batch: Sequence[rows.MessageRow]) -> None:
        if not batch:
            return
        top = max(message.values["seq"] for message in batch)
        self._max_seq = max(self._max_seq, top)
        session = self._session
        # First, so that no message arriving meanwhile takes one of these seqs (it waits
        # for the import's transaction).
        await session.execute(
            update(Conversation)
            .where(Conversation.id == self.conversation_id, Conversation.last_seq < top)
            .values(last_seq=top)
        )
        await self._find_authors(batch)
        values = [self._message_values(message) for message in batch]
        created = set(
            await session.scalars(
                insert_or_skip(session, Message).values(values).returning(Message.seq)
            )
        )
        if created:
            # Imported messages may take seqs before the newest (an erased history given
            # back): kept live windows read only after it, so they are told.
            await session.execute(
                update(Conversation)
                .where(Conversation.id == self.conversation_id)
                .values(live_version=Conversation.live_version + 1)
            )
        await self._check_skipped([v for v in values if v["seq"] not in created])
        self._counts["messages"].created += len(created)

    async def attachment(self, row: rows.AttachmentRow) -> None:
        """A file of a message imported (or here already), unless the message has it:
        the same bytes under the same name. A file of no message here is a conflict."""
        session = self._session
        message_id = await session.scalar(
            select(Message.id).where(
                Message.conversation_id == self.conversation_id, Message.seq == row.seq
            )
        )
        if message_id is None:
            self._conflicts += 1
            return
        here = await session.scalar(
            select(Attachment.id).where(
                Attachment.message_id == message_id,
                Attachment.sha256 == row.values["sha256"],
                Attachment.file_name == row.values["file_name"],
            )
        )
        if here is None:
            await session.execute(insert(Attachment).values(**row.values, message_id=message_id))
        self._counts["attachments"].add(here is None)

    def _message_values(self, message: rows.MessageRow) -> dict[str, Any]:
        author = None if message.author is None else self._authors.get(message.author)
        archived = None if message.chunk is None else self._chunk_ids.get(message.chunk)
        return message.values | {
            "conversation_id": self.conversation_id,
            "identity_id": author,
            "chunk_id": archived,
        }

    async def _find_authors(self, batch: Sequence[rows.MessageRow]) -> None:
        """Authors that are not among the file's identities: the identity here if it is
        the person's, else none. Someone else's (an unlinked channel's, or any the file
        names) is not the file's to give: an answer to the message, or an operator's
        message after it, would go to their chat, and erasing them would take it."""
        unknown = {m.author for m in batch if m.author is not None} - self._authors.keys()
        found = await self._identities(sorted(unknown))
        self._authors |= {
            key: found[key][0] if key in found and found[key][1] == self.user_id else None
            for key in unknown
        }

    async def _check_skipped(self, skipped: list[dict[str, Any]]) -> None:
        """A message not inserted is here already if its seq holds the same message;
        anything else is a conflict."""
        if not skipped:
            return
        here = {
            row[0]: tuple(row[1:])
            for row in await self._session.execute(
                select(Message.seq, Message.role, Message.text, Message.created_at).where(
                    Message.conversation_id == self.conversation_id,
                    Message.seq.in_([v["seq"] for v in skipped]),
                )
            )
        }
        for values in skipped:
            same = here.get(values["seq"]) == (values["role"], values["text"], values["created_at"])
            self._counts["messages"].skipped += same
            self._conflicts += not same

    async def bookkeeping(self, row: rows.ConversationRow | None) -> None:
        """The conversation's seq bookkeeping covers what was imported; every imported
        user message counts as answered (an import starts no turn)."""
        if row is None or self.conversation_id is None:
            return
        last_seq = max(row.last_seq, self._max_seq)
        values: dict[str, Any] = {
            "last_seq": _greatest(Conversation.last_seq, last_seq),
            "last_user_seq": _greatest(Conversation.last_user_seq, row.last_user_seq),
            "answered_seq": _greatest(Conversation.answered_seq, row.last_user_seq),
        }
        if row.last_message_at is not None:
            values["last_message_at"] = _greatest(Conversation.last_message_at, row.last_message_at)
        await self._session.execute(
            update(Conversation).where(Conversation.id == self.conversation_id).values(values)
        )

    async def profile(self, facts: Sequence[rows.Fact]) -> None:
        """Lines the profile does not have yet go at its end, with their evidence."""
        if not facts:
            return
        session = self._session
        profile = await session.scalar(
            select(Profile).where(Profile.user_id == self.user_id).with_for_update()
        )
        lines = profile_rows.read(profile)
        known = {line.casefold() for line, _ in lines}
        for fact in facts:
            new = fact.text.casefold() not in known
            self._counts["profile_lines"].add(new)
            if new:
                known.add(fact.text.casefold())
                lines.append((fact.text, rows.evidence_json(fact.evidence, self._chunk_ids)))
        if self._counts["profile_lines"].created == 0:
            return
        if profile is None:
            profile = Profile(user_id=self.user_id, revision=0, tidy_failures=0)
            profile.tidy_after_chars, profile.facts_refused = 0, 0
            session.add(profile)
        profile_rows.write(session, profile, lines, self._now, by=IMPORTED_BY)
        await session.flush()

    async def retired(self, facts: Sequence[rows.Fact]) -> None:
        if not facts:
            return
        session = self._session
        query = select(RetiredFact.text, RetiredFact.reason, RetiredFact.retired_at).where(
            RetiredFact.user_id == self.user_id,
            RetiredFact.retired_at.in_({fact.retired_at for fact in facts}),
        )
        here = {(row[0], row[1], row[2]) for row in await session.execute(query)}
        for fact in facts:
            assert fact.retired_at is not None  # read as required (rows.retired_fact)
            key = (fact.text, fact.reason, fact.retired_at)
            self._counts["retired_facts"].add(key not in here)
            if key in here:
                continue
            here.add(key)
            evidence = rows.evidence_json(fact.evidence, self._chunk_ids)
            session.add(
                RetiredFact(
                    user_id=self.user_id,
                    text=fact.text,
                    reason=fact.reason,
                    profile_revision=fact.profile_revision,
                    retired_at=fact.retired_at,
                    evidence=json.dumps(evidence) if evidence else None,
                )
            )
        await session.flush()

    async def schedules(self, batch: Sequence[rows.ScheduleRow]) -> None:
        """Reminders of the conversation, with their firings; one the conversation has
        already (the same text, set at the same moment) is skipped."""
        if not batch:
            return
        session = self._session
        conversation_id = self.conversation_id
        if conversation_id is None:
            raise ValueError("schedules need the person's conversation")
        query = select(Schedule.created_at, Schedule.text).where(
            Schedule.conversation_id == conversation_id,
            Schedule.created_at.in_({row.created_at for row in batch}),
        )
        here = {(row[0], row[1]) for row in await session.execute(query)}
        for row in batch:
            key = (row.created_at, row.text)
            self._counts["schedules"].add(key not in here)
            if key in here:
                continue
            here.add(key)
            schedule = Schedule(
                conversation_id=conversation_id,
                kind=row.kind,
                text=row.text,
                starts_local=row.starts_local,
                zone=row.zone,
                repeat=row.repeat,
                channel=row.channel,
                created_by=row.created_by,
                created_at=row.created_at,
                state=row.state,
                next_local=row.next_local,
                next_due_at=row.next_due_at,
            )
            session.add(schedule)
            await session.flush()
            due_times = set()
            for fire in row.fires:
                if fire.due_at in due_times:  # one firing per due time, as ever
                    continue
                due_times.add(fire.due_at)
                session.add(
                    ScheduleFire(
                        schedule_id=schedule.id,
                        due_at=fire.due_at,
                        fired_at=fire.fired_at,
                        outcome=fire.outcome,
                        missed=fire.missed,
                        detail=fire.detail,
                    )
                )
        await session.flush()


async def _own_conversation(
    session: AsyncSession, user_id: uuid.UUID, row: rows.ConversationRow
) -> uuid.UUID:
    """The person's own conversation, made if they have none."""
    found = await session.scalar(select(Conversation.id).where(Conversation.user_id == user_id))
    if found is not None:
        return found
    conversation = personal_conversation(user_id, row.title, row.created_at)
    session.add(conversation)
    await session.flush()
    return conversation.id


def _greatest(column: Any, value: Any) -> ColumnElement[Any]:
    """The larger of a column and a value, on either database (a NULL column: the value)."""
    return case((or_(column.is_(None), column < value), value), else_=column)
