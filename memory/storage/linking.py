"""Repository for link codes: one person's identities on several channels become one
person with one conversation, their two histories merged in arrival order."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage import profile_rows
from memory.storage.codes import new_code, normalise_code
from memory.storage.inserts import insert_or_skip
from memory.storage.models import (
    Chunk,
    Conversation,
    Identity,
    LinkCode,
    Lookup,
    Message,
    Profile,
    ProfileChange,
    RetiredFact,
    Role,
    Schedule,
    User,
)
from memory.storage.usage_days import move_usage

_CREATE_ATTEMPTS = 3
# Who joined two profiles into one, as the profile's change log says.
LINKED_BY_PERSON = "person: /link"
MERGED_BY_OPERATOR = "operator: merge"


class LinkStatus(StrEnum):
    READY = "ready"  # the code can be redeemed by this identity
    LINKED = "linked"
    UNKNOWN = "unknown"
    EXPIRED = "expired"
    USED = "used"
    ALREADY_LINKED = "already linked"


@dataclass(frozen=True, slots=True)
class LinkCheck:
    status: LinkStatus
    # The conversation that holds both histories once the link is made.
    survivor: uuid.UUID | None = None
    issuer_channel: str = ""


@dataclass(frozen=True, slots=True)
class _Row:
    """A message as the merge sees it."""

    id: int
    conversation_id: uuid.UUID
    seq: int
    role: str
    created_at: datetime
    reply_to_seq: int | None


class Links:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def issue_link_code(
        self, identity_id: uuid.UUID, *, now: datetime, ttl: timedelta
    ) -> str:
        for _ in range(_CREATE_ATTEMPTS):
            async with self._sessions() as session:
                user_id = await session.scalar(
                    select(Identity.user_id).where(Identity.id == identity_id)
                )
                if user_id is None:
                    raise LookupError(f"no identity {identity_id}")
                code: str | None = await session.scalar(
                    insert_or_skip(session, LinkCode)
                    .values(
                        code=new_code(),
                        user_id=user_id,
                        identity_id=identity_id,
                        created_at=now,
                        expires_at=now + ttl,
                    )
                    .returning(LinkCode.code)
                )
                if code is None:
                    continue  # the code is taken (one in 31^8): draw another
                await session.commit()
                return code
        raise RuntimeError("could not issue a link code")

    async def check_link_code(
        self, code: str, identity_id: uuid.UUID, *, now: datetime
    ) -> LinkCheck:
        """Whether `identity_id` may redeem `code`, and where the histories would meet."""
        async with self._sessions() as session:
            return await _check(session, normalise_code(code), identity_id, now)

    async def redeem_link_code(
        self, code: str, identity_id: uuid.UUID, *, now: datetime, answering_message_id: int
    ) -> LinkCheck:
        """Attach the identity's person to the code issuer's, in one transaction.

        All identities of the redeeming person move to the issuer's user, and the two
        personal conversations become one: messages are renumbered in the order they
        arrived (each conversation's own order kept), except `answering_message_id` (the
        `/link CODE` message being answered now), which goes after everything the
        surviving conversation already had, so it is the one the new answer follows.
        The archive's chunks of both are dropped and their messages made live again:
        their seq ranges no longer hold, and the archiver cuts them anew.
        """
        code = normalise_code(code)
        async with self._sessions() as session:
            check = await _check(session, code, identity_id, now)
            if check.status is not LinkStatus.READY:
                return check
            # The conditional update is the first write: of two racing redemptions,
            # only one finds the code still unused.
            claimed = await session.scalar(
                update(LinkCode)
                .where(LinkCode.code == code, LinkCode.used_at.is_(None))
                .values(used_at=now)
                .returning(LinkCode.user_id)
            )
            if claimed is None:
                await session.rollback()
                return LinkCheck(LinkStatus.USED)
            absorbed_user = await session.scalar(
                select(Identity.user_id).where(Identity.id == identity_id)
            )
            assert absorbed_user is not None
            assert check.survivor is not None
            await _merge_people(
                session,
                survivor_user=claimed,
                survivor=check.survivor,
                absorbed_user=absorbed_user,
                answering_message_id=answering_message_id,
                now=now,
                by=LINKED_BY_PERSON,
            )
            await session.commit()
            return LinkCheck(LinkStatus.LINKED, check.survivor, check.issuer_channel)

    async def merge_users(
        self, survivor_user: uuid.UUID, absorbed_user: uuid.UUID, *, now: datetime
    ) -> bool:
        """Attach every identity of `absorbed_user` to `survivor_user` and merge their
        conversations, as a redeemed link code does (an operator's merge); False if
        either person is gone or they are one already."""
        if survivor_user == absorbed_user:
            return False
        async with self._sessions() as session:
            survivor = await session.scalar(
                select(Conversation.id).where(Conversation.user_id == survivor_user)
            )
            absorbed = await session.scalar(select(User.id).where(User.id == absorbed_user))
            if survivor is None or absorbed is None:
                return False
            await _merge_people(
                session,
                survivor_user=survivor_user,
                survivor=survivor,
                absorbed_user=absorbed_user,
                answering_message_id=0,  # no message is being answered: time order only
                now=now,
                by=MERGED_BY_OPERATOR,
            )
            await session.commit()
        return True

    async def personal_conversations(self, *users: uuid.UUID) -> list[uuid.UUID]:
        async with self._sessions() as session:
            return list(
                await session.scalars(
                    select(Conversation.id)
                    .where(Conversation.user_id.in_(users))
                    .order_by(Conversation.id)
                )
            )


async def _check(
    session: AsyncSession, code: str, identity_id: uuid.UUID, now: datetime
) -> LinkCheck:
    row = await session.get(LinkCode, code)
    if row is None:
        return LinkCheck(LinkStatus.UNKNOWN)
    if row.used_at is not None:
        return LinkCheck(LinkStatus.USED)
    if row.expires_at <= now:
        return LinkCheck(LinkStatus.EXPIRED)
    redeemer = await session.scalar(select(Identity.user_id).where(Identity.id == identity_id))
    issuer_channel = await session.scalar(
        select(Identity.channel).where(Identity.id == row.identity_id)
    )
    if redeemer == row.user_id:
        return LinkCheck(LinkStatus.ALREADY_LINKED)
    survivor = await session.scalar(
        select(Conversation.id).where(Conversation.user_id == row.user_id)
    )
    return LinkCheck(LinkStatus.READY, survivor, issuer_channel or "")


async def _merge_people(
    session: AsyncSession,
    *,
    survivor_user: uuid.UUID,
    survivor: uuid.UUID,
    absorbed_user: uuid.UUID,
    answering_message_id: int,
    now: datetime,
    by: str,
) -> None:
    """One person from two: every identity, link code, profile line and retired fact of
    `absorbed_user` becomes the survivor's, and their conversations one; then the absorbed
    user, left with nothing, goes (so erasing the survivor erases all of them)."""
    absorbed = await session.scalar(
        select(Conversation.id).where(Conversation.user_id == absorbed_user)
    )
    renumbering = _Renumbering({})
    if absorbed is not None:
        renumbering = await _merge_conversations(session, survivor, absorbed, answering_message_id)
    conversation_of = {survivor_user: survivor, absorbed_user: absorbed}
    for user, conversation in conversation_of.items():
        seqs = renumbering.of(conversation)
        for identity_id, seen in await session.execute(
            select(Identity.id, Identity.seen_seq).where(Identity.user_id == user)
        ):
            await session.execute(
                update(Identity)
                .where(Identity.id == identity_id)
                .values(user_id=survivor_user, seen_seq=_carried(seen, seqs))
            )
    await session.execute(
        update(LinkCode).where(LinkCode.user_id == absorbed_user).values(user_id=survivor_user)
    )
    await _merge_profiles(
        session, survivor_user, absorbed_user, renumbering, conversation_of, now, by
    )
    await move_usage(session, absorbed_user, survivor_user)
    await session.execute(delete(User).where(User.id == absorbed_user))


@dataclass(frozen=True, slots=True)
class _Renumbering:
    """The new seq of each message of two merged conversations: (conversation, old seq)."""

    new_seq: dict[tuple[uuid.UUID, int], int]

    def of(self, conversation: uuid.UUID | None) -> dict[int, int] | None:
        """Old seq -> new for one conversation; None if it was not renumbered."""
        if not self.new_seq:
            return None
        return {seq: new for (c, seq), new in self.new_seq.items() if c == conversation}


def _carried(seen: int, seqs: dict[int, int] | None) -> int:
    """How far a person had read, in the new numbering: up to the new seq of the last
    message they had read (the other history's messages after it are new to them)."""
    if seqs is None:
        return seen
    return max((new for old, new in seqs.items() if old <= seen), default=0)


async def _merge_profiles(
    session: AsyncSession,
    survivor_user: uuid.UUID,
    absorbed_user: uuid.UUID,
    renumbering: _Renumbering,
    conversation_of: dict[uuid.UUID, uuid.UUID | None],
    now: datetime,
    by: str,
) -> None:
    """The absorbed person's facts join the survivor's (a line both had, once, with the
    evidence of both); evidence, and retired facts', follows its messages to their new
    seqs."""
    rows = {
        user: await session.scalar(select(Profile).where(Profile.user_id == user).with_for_update())
        for user in (survivor_user, absorbed_user)
    }
    # The absorbed profile's change log stays with its lines.
    await session.execute(
        update(ProfileChange)
        .where(ProfileChange.user_id == absorbed_user)
        .values(user_id=survivor_user)
    )
    merged: dict[str, tuple[str, profile_rows.RawSources]] = {}  # by the line, any case
    for user in (survivor_user, absorbed_user):
        seqs = renumbering.of(conversation_of[user])
        for line, sources in profile_rows.read(rows[user]):
            carried = sources if seqs is None else profile_rows.renumbered(sources, seqs)
            merged.setdefault(line.casefold(), (line, []))[1].extend(carried)
        for fact in await session.scalars(select(RetiredFact).where(RetiredFact.user_id == user)):
            fact.user_id = survivor_user
            if seqs is not None and fact.evidence:
                fact.evidence = json.dumps(profile_rows.renumbered(json.loads(fact.evidence), seqs))
    survivor_row, absorbed_row = rows[survivor_user], rows[absorbed_user]
    if absorbed_row is None and (survivor_row is None or not renumbering.new_seq):
        return  # nothing joins, nothing moved
    if survivor_row is None:
        survivor_row = Profile(user_id=survivor_user, text="", revision=0, facts_refused=0)
        session.add(survivor_row)
    if absorbed_row is not None:
        survivor_row.facts_refused += absorbed_row.facts_refused
        await session.delete(absorbed_row)
    profile_rows.write(session, survivor_row, list(merged.values()), now, by=by)


async def _merge_conversations(
    session: AsyncSession, survivor: uuid.UUID, absorbed: uuid.UUID, answering_message_id: int
) -> _Renumbering:
    # Each statement depends on the one before (renumbering needs the seqs parked), so
    # they stay together in order rather than in helpers that could be called apart.
    both = (survivor, absorbed)
    answered = {
        row.id: row.answered_seq
        for row in await session.execute(
            select(Conversation.id, Conversation.answered_seq).where(Conversation.id.in_(both))
        )
    }
    rows = {
        conversation: await _rows(session, conversation) for conversation in (survivor, absorbed)
    }
    order = _interleave(rows[survivor], rows[absorbed], answering_message_id)
    new_seq = {(row.conversation_id, row.seq): index for index, row in enumerate(order, 1)}
    was_answered = [
        new_seq[(row.conversation_id, row.seq)]
        for row in order
        if row.role == Role.USER
        and (row.seq <= answered[row.conversation_id] or row.id == answering_message_id)
    ]
    user_seqs = [new_seq[(r.conversation_id, r.seq)] for r in order if r.role == Role.USER]

    # Chunks describe seq ranges that are about to change.
    await session.execute(
        update(Message).where(Message.conversation_id.in_(both)).values(chunk_id=None)
    )
    await session.execute(delete(Chunk).where(Chunk.conversation_id.in_(both)))
    # Park every seq out of the way first: (conversation, seq) is unique at every step.
    await session.execute(
        update(Message).where(Message.conversation_id.in_(both)).values(seq=-Message.id)
    )
    if order:
        await session.execute(
            update(Message),
            [_renumbered(row, new_seq, survivor) for row in order],
        )
    last_at = await session.scalar(
        select(func.max(Conversation.last_message_at)).where(Conversation.id.in_(both))
    )
    await session.execute(
        update(Lookup).where(Lookup.conversation_id == absorbed).values(conversation_id=survivor)
    )
    # Reminders follow the conversation they were set in, firings and all.
    await session.execute(
        update(Schedule)
        .where(Schedule.conversation_id == absorbed)
        .values(conversation_id=survivor)
    )
    await session.execute(delete(Conversation).where(Conversation.id == absorbed))
    await session.execute(
        update(Conversation)
        .where(Conversation.id == survivor)
        .values(
            # Its live window was renumbered and joined by the other's.
            live_version=Conversation.live_version + 1,
            last_seq=len(order),
            last_user_seq=max(user_seqs, default=0),
            answered_seq=max(was_answered, default=0),
            last_message_at=last_at,
        )
    )
    return _Renumbering(new_seq)


async def _rows(session: AsyncSession, conversation_id: uuid.UUID) -> list[_Row]:
    query = (
        select(
            Message.id,
            Message.conversation_id,
            Message.seq,
            Message.role,
            Message.created_at,
            Message.reply_to_seq,
        )
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.seq)
    )
    return [_Row(*row) for row in await session.execute(query)]


def _interleave(first: Sequence[_Row], second: Sequence[_Row], last_id: int) -> list[_Row]:
    """Merge two seq-ordered histories by arrival time, keeping each one's own order.

    Arrival time is the gateway's clock, the one clock both histories share. The row
    `last_id` sorts after every row of the other history."""
    merged: list[_Row] = []
    i = j = 0
    while i < len(first) and j < len(second):
        a, b = first[i], second[j]
        if b.id == last_id or (a.id != last_id and a.created_at <= b.created_at):
            merged.append(a)
            i += 1
        else:
            merged.append(b)
            j += 1
    merged.extend(first[i:])
    merged.extend(second[j:])
    return merged


def _renumbered(
    row: _Row, new_seq: dict[tuple[uuid.UUID, int], int], survivor: uuid.UUID
) -> dict[str, Any]:
    reply_to = None
    if row.reply_to_seq is not None:
        reply_to = new_seq.get((row.conversation_id, row.reply_to_seq), row.reply_to_seq)
    return {
        "id": row.id,
        "conversation_id": survivor,
        "seq": new_seq[(row.conversation_id, row.seq)],
        "reply_to_seq": reply_to,
    }
