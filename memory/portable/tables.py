"""The database side of one import: rows matched by their natural keys (see
imports.py), the others inserted, a page per transaction, and what happened counted."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.portable import rows
from memory.portable.format import AuthorKey, ChunkKey
from memory.storage import profile_rows
from memory.storage.conversations import personal_conversation
from memory.storage.inserts import insert_or_skip
from memory.storage.models import Chunk, Conversation, Identity, Message, Profile, RetiredFact, User

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
    transcript_files: int  # written under the archive directory
    # Rows of the file not imported because this database holds something else there.
    conflicts: int


class ImportConflict(Exception):
    """The person here has another history than the file's: nothing was imported."""


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
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], person: rows.Person, now: datetime
    ) -> None:
        self._sessions = sessions
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
            for name in ("identities", "chunks", "messages", "profile_lines", "retired_facts")
        }
        self._conflicts = 0

    @property
    def user_id(self) -> uuid.UUID:
        assert self._user_id is not None, "the person is settled before any row is theirs"
        return self._user_id

    def counts(self, transcript_files: int) -> ImportCounts:
        return ImportCounts(
            user_id=self.user_id,
            user_created=self._user_created,
            **{name: Tally(c.created, c.skipped) for name, c in self._counts.items()},
            transcript_files=transcript_files,
            conflicts=self._conflicts,
        )

    @property
    def settled(self) -> bool:
        return self._user_id is not None

    async def settle(
        self, identities: Sequence[rows.IdentityRow], conversation: rows.ConversationRow | None
    ) -> None:
        """Whose the import is: the person here with the first of the file's identities
        that exists here, or a new one; then the identities and the conversation they
        do not have yet. `ImportConflict`, before anything is written, if that person's
        conversation here holds another history."""
        keys = [row.key for row in identities]
        async with self._sessions() as session:
            found = await self._identities(session, keys)
            owner = next((found[key][1] for key in keys if key in found), None)
            if owner is not None and conversation is not None:
                await _same_history(session, owner, conversation)
            if owner is None:
                owner, self._user_created = await self._new_person(session), True
            for row in identities:
                await self._add_identity(session, row, found.get(row.key), owner)
            if conversation is not None:
                self.conversation_id = await _own_conversation(session, owner, conversation)
            await session.commit()
            self._authors |= {k: v[0] for k, v in (await self._identities(session, keys)).items()}
        self._user_id = owner

    async def _new_person(self, session: AsyncSession) -> uuid.UUID:
        user = User(
            display_name=self._person.display_name,
            timezone=self._person.timezone,
            created_at=self._person.created_at,
        )
        session.add(user)
        await session.flush()
        return user.id

    async def _add_identity(
        self,
        session: AsyncSession,
        row: rows.IdentityRow,
        found: tuple[uuid.UUID, uuid.UUID] | None,
        owner: uuid.UUID,
    ) -> None:
        if found is not None:
            self._counts["identities"].add(False)
            self._conflicts += found[1] != owner  # someone else's here: it stays theirs
            return
        created = await session.scalar(
            insert_or_skip(session, Identity)
            .values(
                channel=row.key[0],
                external_id=row.key[1],
                user_id=owner,
                display_name=row.display_name,
                created_at=row.created_at,
            )
            .returning(Identity.id)
        )
        self._counts["identities"].add(created is not None)

    async def _identities(
        self, session: AsyncSession, keys: Sequence[AuthorKey]
    ) -> dict[AuthorKey, tuple[uuid.UUID, uuid.UUID]]:
        """(identity id, user id) of each of these identities that exists here."""
        if not keys:
            return {}
        query = select(Identity.channel, Identity.external_id, Identity.id, Identity.user_id).where(
            tuple_(Identity.channel, Identity.external_id).in_(keys)
        )
        return {(r[0], r[1]): (r[2], r[3]) for r in await session.execute(query)}

    async def chunks(self, batch: Sequence[rows.ChunkRow]) -> list[tuple[int, rows.ChunkRow]]:
        """Insert the chunks not here yet; the level-0 ones inserted with a transcript
        (their files are to be written)."""
        written = []
        async with self._sessions() as session:
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
                    written.append((new_id, chunk))
                if new_id is not None:
                    self._chunk_ids[chunk.key] = new_id
            await session.commit()
        return written

    async def messages(self, batch: Sequence[rows.MessageRow]) -> None:
        if not batch:
            return
        top = max(message.values["seq"] for message in batch)
        self._max_seq = max(self._max_seq, top)
        async with self._sessions() as session:
            # First, so that no message arriving meanwhile takes one of these seqs.
            await session.execute(
                update(Conversation)
                .where(Conversation.id == self.conversation_id, Conversation.last_seq < top)
                .values(last_seq=top)
            )
            await self._find_authors(session, batch)
            values = [self._message_values(message) for message in batch]
            created = set(
                await session.scalars(
                    insert_or_skip(session, Message).values(values).returning(Message.seq)
                )
            )
            await self._check_skipped(session, [v for v in values if v["seq"] not in created])
            await session.commit()
        self._counts["messages"].created += len(created)

    def _message_values(self, message: rows.MessageRow) -> dict[str, Any]:
        author = None if message.author is None else self._authors.get(message.author)
        archived = None if message.chunk is None else self._chunk_ids.get(message.chunk)
        return message.values | {
            "conversation_id": self.conversation_id,
            "identity_id": author,
            "chunk_id": archived,
        }

    async def _find_authors(self, session: AsyncSession, batch: Sequence[rows.MessageRow]) -> None:
        """Authors that are not among the file's identities (an unlinked channel's old
        messages): the identity here, if there is one."""
        unknown = {m.author for m in batch if m.author is not None} - self._authors.keys()
        found = await self._identities(session, sorted(unknown))
        self._authors |= {key: found[key][0] if key in found else None for key in unknown}

    async def _check_skipped(self, session: AsyncSession, skipped: list[dict[str, Any]]) -> None:
        """A message not inserted is here already if its seq holds the same message;
        anything else is a conflict."""
        if not skipped:
            return
        here = {
            row[0]: tuple(row[1:])
            for row in await session.execute(
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
        async with self._sessions() as session:
            await session.execute(
                update(Conversation).where(Conversation.id == self.conversation_id).values(values)
            )
            await session.commit()

    async def profile(self, facts: Sequence[rows.Fact]) -> None:
        """Lines the profile does not have yet go at its end, with their evidence."""
        if not facts:
            return
        async with self._sessions() as session:
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
            await session.commit()

    async def retired(self, facts: Sequence[rows.Fact]) -> None:
        if not facts:
            return
        async with self._sessions() as session:
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
            await session.commit()


async def _same_history(
    session: AsyncSession, owner: uuid.UUID, conversation: rows.ConversationRow
) -> None:
    """Refuse to mix two histories in one conversation: the one here must be empty or
    begin with the file's first message (the file is this history, or a part of it)."""
    here = (
        await session.execute(
            select(Message.seq, Message.created_at)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(Conversation.user_id == owner)
            .order_by(Message.seq)
            .limit(1)
        )
    ).one_or_none()
    if here is None or conversation.first is None or tuple(here) == conversation.first:
        return
    raise ImportConflict(
        f"the person {owner} here has another conversation (its first message is seq "
        f"{here[0]} of {here[1]:%Y-%m-%d %H:%M}); importing would mix two histories. "
        "Erase that person first (export them to keep it), then import."
    )


async def _own_conversation(
    session: AsyncSession, owner: uuid.UUID, row: rows.ConversationRow
) -> uuid.UUID:
    """The person's own conversation, made if they have none."""
    found = await session.scalar(select(Conversation.id).where(Conversation.user_id == owner))
    if found is not None:
        return found
    conversation = personal_conversation(owner, row.title, row.created_at)
    session.add(conversation)
    await session.flush()
    return conversation.id


def _greatest(column: Any, value: Any) -> ColumnElement[Any]:
    """The larger of a column and a value, on either database (a NULL column: the value)."""
    return case((or_(column.is_(None), column < value), value), else_=column)
