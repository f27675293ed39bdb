"""Repository for profiles and their retired facts; every change is an edit against a
revision, in one transaction."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, bindparam, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.profile.facts import (
    ChangeView,
    Edit,
    Evidence,
    Fact,
    ProfileView,
    Remove,
    RetiredView,
    Sources,
    StaleRevision,
    apply_edits,
    clean_fact,
)
from memory.storage import profile_rows
from memory.storage.engine import read
from memory.storage.models import (
    Chunk,
    ConversationKind,
    Profile,
    ProfileChange,
    RetiredFact,
)
from memory.storage.tables import CONVERSATIONS, PROFILES

# Who changed a profile, as its change log says.
BY_EXTRACTION = "model: facts"
BY_TIDY = "model: tidying"
BY_FORGET = "person: /forget"
BY_OPERATOR = "operator"


class Profiles:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def facts_refused(self) -> int:
        """Facts refused for want of evidence, over every profile."""
        async with self._sessions() as session:
            total = await session.scalar(select(func.coalesce(func.sum(Profile.facts_refused), 0)))
        return int(total or 0)

    async def get(self, user_id: uuid.UUID) -> ProfileView:
        async with self._sessions() as session:
            row = await session.get(Profile, user_id)
        return _view(user_id, row)

    async def of_conversation(self, conversation_id: uuid.UUID) -> tuple[str, ...]:
        """The profile shown in a conversation: its owner's, or nothing for a group."""
        text = await self._owners("text", conversation_id)
        return tuple(profile_rows.lines_of(text or ""))

    async def refused_in(self, conversation_id: uuid.UUID) -> int:
        """Facts refused for want of evidence, for a personal conversation's owner."""
        return int(await self._owners("facts_refused", conversation_id) or 0)

    async def _owners(self, column: str, conversation_id: uuid.UUID) -> Any:
        """A column of the profile of a personal conversation's owner (None: a group)."""
        query, params = _of_owner(column), {"conversation_id": conversation_id}
        return await read(self._sessions, lambda c: c.scalar(query, params))

    async def append(
        self,
        user_id: uuid.UUID,
        facts: Sequence[Fact],
        now: datetime,
        *,
        chunk_id: int | None,
        refused: int = 0,
    ) -> ProfileView:
        """Add new facts at the end (skipping ones already there) and, in the same
        transaction, mark the chunk they came from as done and count the facts refused
        for want of evidence."""
        async with self._sessions() as session:
            row = await _locked(session, user_id, now)
            if chunk_id is not None:
                first = await session.execute(
                    update(Chunk)
                    .where(Chunk.id == chunk_id, Chunk.facts_extracted.is_(False))
                    .values(facts_extracted=True)
                )
                if first.rowcount == 0:  # type: ignore[attr-defined]
                    # Another run of this extraction got here first: its facts stand.
                    unchanged = _view(user_id, row)
                    await session.rollback()
                    return unchanged
            current = _view(user_id, row).facts
            added = list(current)
            known = {fact.text.casefold() for fact in current}
            for fact in facts:
                line = clean_fact(fact.text)
                if line is not None and line.casefold() not in known:
                    added.append(Fact(line, fact.sources))
                    known.add(line.casefold())
            if len(added) != len(current):
                by = (
                    BY_EXTRACTION
                    if chunk_id is None
                    else f"{BY_EXTRACTION} from archive #{chunk_id}"
                )
                _store(session, row, added, now, by)
            row.facts_refused += refused
            await session.commit()
            return _view(user_id, row)

    async def edit(
        self,
        user_id: uuid.UUID,
        revision: int,
        edits: Sequence[Edit],
        now: datetime,
        *,
        by: str,
        shrink: bool = False,
    ) -> ProfileView:
        """Apply edits made against `revision`, `by` someone ("operator"); `StaleRevision`
        if it moved on. With `shrink` (tidying) every new line must be shorter than what
        it replaces; a person's correction may be longer."""
        async with self._sessions() as session:
            row = await _locked(session, user_id, now)
            if row.revision != revision:
                raise StaleRevision(revision, row.revision)
            kept, retired = apply_edits(_view(user_id, row).facts, edits, shrink=shrink)
            session.add_all(
                RetiredFact(
                    user_id=user_id,
                    text=fact.text,
                    reason=reason,
                    profile_revision=row.revision,
                    retired_at=now,
                    evidence=_dump(fact.sources),
                )
                for fact, reason in retired
            )
            _store(session, row, kept, now, by)
            await session.commit()
            return _view(user_id, row)

    async def forget(self, user_id: uuid.UUID, needle: str, now: datetime) -> list[str]:
        """Retire every line containing `needle` (any case); the lines retired."""
        for _ in range(3):  # an extraction may land in between: try again on its revision
            profile = await self.get(user_id)
            wanted = needle.casefold()
            numbers = tuple(
                n for n, line in enumerate(profile.lines, 1) if wanted in line.casefold()
            )
            if not numbers:
                return []
            try:
                await self.edit(user_id, profile.revision, [Remove(numbers)], now, by=BY_FORGET)
            except StaleRevision:
                continue
            return [profile.lines[n - 1] for n in numbers]
        raise StaleRevision(profile.revision, profile.revision + 1)

    async def changes(self, user_id: uuid.UUID, *, before_id: int, limit: int) -> list[ChangeView]:
        """The profile's change log, newest first, a page at a time."""
        query = (
            select(ProfileChange)
            .where(ProfileChange.user_id == user_id, ProfileChange.id < before_id)
            .order_by(ProfileChange.id.desc())
            .limit(limit)
        )
        async with self._sessions() as session:
            return [
                ChangeView(c.id, c.revision, c.at, c.by, json.loads(c.added), json.loads(c.removed))
                for c in await session.scalars(query)
            ]

    async def retired(self, user_id: uuid.UUID, needle: str = "") -> list[RetiredView]:
        query = select(RetiredFact).where(RetiredFact.user_id == user_id)
        if needle:
            query = query.where(RetiredFact.text.ilike(f"%{needle}%"))
        async with self._sessions() as session:
            rows = await session.scalars(query.order_by(RetiredFact.id))
            return [RetiredView(r.text, r.reason, r.retired_at, _load(r.evidence)) for r in rows]

    async def retired_page(
        self, user_id: uuid.UUID, *, after_id: int, limit: int
    ) -> list[tuple[int, RetiredView]]:
        """Retired facts with their ids, oldest first, a page at a time."""
        query = (
            select(RetiredFact)
            .where(RetiredFact.user_id == user_id, RetiredFact.id > after_id)
            .order_by(RetiredFact.id)
            .limit(limit)
        )
        async with self._sessions() as session:
            return [
                (r.id, RetiredView(r.text, r.reason, r.retired_at, _load(r.evidence)))
                for r in await session.scalars(query)
            ]

    # -- tidy scheduling ---------------------------------------------------------------

    async def tidy_due(self, user_id: uuid.UUID, now: datetime, over_chars: int) -> bool:
        async with self._sessions() as session:
            row = await session.get(Profile, user_id)
        if row is None:
            return False
        size = _view(user_id, row).chars
        waiting = row.tidy_not_before is not None and row.tidy_not_before > now
        return size > over_chars and size > row.tidy_after_chars and not waiting

    async def due_for_tidy(self, now: datetime, over_chars: int) -> list[uuid.UUID]:
        size = func.length(Profile.text)
        query = select(Profile.user_id).where(
            size > over_chars,
            size > Profile.tidy_after_chars,
            or_(Profile.tidy_not_before.is_(None), Profile.tidy_not_before <= now),
        )
        async with self._sessions() as session:
            return list(await session.scalars(query))

    async def tidy_failed(
        self, user_id: uuid.UUID, now: datetime, backoff: Sequence[float]
    ) -> timedelta:
        """Count a failed tidy; the wait before the next try (1 h, 6 h, then 24 h)."""
        async with self._sessions() as session:
            row = await _locked(session, user_id, now)
            row.tidy_failures += 1
            wait = timedelta(seconds=backoff[min(row.tidy_failures, len(backoff)) - 1])
            row.tidy_not_before = now + wait
            await session.commit()
        return wait

    async def tidy_finished(self, user_id: uuid.UUID, *, wait_until_chars: int) -> None:
        """A tidy ran to the end; if it could not shrink the profile enough, the next
        one waits until the profile has grown past `wait_until_chars`."""
        async with self._sessions() as session:
            await session.execute(
                update(Profile)
                .where(Profile.user_id == user_id)
                .values(tidy_failures=0, tidy_not_before=None, tidy_after_chars=wait_until_chars)
            )
            await session.commit()


def _view(user_id: uuid.UUID, row: Profile | None) -> ProfileView:
    if row is None:
        return ProfileView(user_id, (), 0)
    stored = profile_rows.read(row)
    lines = tuple(line for line, _ in stored)
    sources = tuple(tuple(Evidence.from_json(e) for e in raw) for _, raw in stored)
    return ProfileView(user_id, lines, row.revision, sources, row.facts_refused)


def _store(
    session: AsyncSession, row: Profile, facts: Sequence[Fact], now: datetime, by: str
) -> None:
    lines = [(fact.text, [e.to_json() for e in fact.sources]) for fact in facts]
    profile_rows.write(session, row, lines, now, by=by)


def _dump(sources: Sources) -> str | None:
    return json.dumps([e.to_json() for e in sources]) if sources else None


def _load(evidence: str | None) -> Sources:
    return tuple(Evidence.from_json(e) for e in json.loads(evidence)) if evidence else ()


async def _locked(session: AsyncSession, user_id: uuid.UUID, now: datetime) -> Profile:
    """The profile row, locked for this transaction (created empty if missing)."""
    row = await session.scalar(select(Profile).where(Profile.user_id == user_id).with_for_update())
    if row is None:
        row = Profile(
            user_id=user_id,
            text="",
            revision=0,
            updated_at=now,
            tidy_failures=0,
            tidy_after_chars=0,
            facts_refused=0,
        )
        session.add(row)
        await session.flush()
    return row


@functools.cache
def _of_owner(column: str) -> Select[Any]:
    """`_owners`'s read, built once per column: every turn reads the profile
    (`memory.storage.tables`)."""
    return (
        select(PROFILES.c[column])
        .join(CONVERSATIONS, CONVERSATIONS.c.user_id == PROFILES.c.user_id)
        .where(
            CONVERSATIONS.c.id == bindparam("conversation_id"),
            CONVERSATIONS.c.kind == ConversationKind.PERSONAL,
        )
    )
