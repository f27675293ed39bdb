"""Repository for who may talk and who is who.

Pairing requests (an unknown person waiting for an operator), group conversations, and
one-time link codes that attach another channel's identity to the same person, merging
their two conversations into one. Every method is one transaction; times come from the
caller.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.models import (
    Chunk,
    Conversation,
    ConversationKind,
    Identity,
    LinkCode,
    Message,
    PairingRequest,
    Role,
    User,
)

# No 0/O or 1/I/L: codes are read off one screen and typed into another.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
_CREATE_ATTEMPTS = 3


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(text: str) -> str:
    """What a person typed, as a code: case, spaces and dashes do not matter."""
    return "".join(text.split()).replace("-", "").upper()


# -- pairing --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pairing:
    channel: str
    external_id: str
    display_name: str
    code: str
    created_at: datetime
    expires_at: datetime
    approved_at: datetime | None


class Approval(StrEnum):
    APPROVED = "approved"
    ALREADY_APPROVED = "already approved"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


def _pairing(row: PairingRequest) -> Pairing:
    return Pairing(
        channel=row.channel,
        external_id=row.external_id,
        display_name=row.display_name,
        code=row.code,
        created_at=row.created_at,
        expires_at=row.expires_at,
        approved_at=row.approved_at,
    )


# -- linking --------------------------------------------------------------------------


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


class UnlinkStatus(StrEnum):
    UNLINKED = "unlinked"
    ONLY_IDENTITY = "only identity"


@dataclass(frozen=True, slots=True)
class _Row:
    """A message as the merge sees it."""

    id: int
    conversation_id: uuid.UUID
    seq: int
    role: str
    created_at: datetime
    reply_to_seq: int | None


class Identities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    # -- pairing ----------------------------------------------------------------------

    async def is_approved(self, channel: str, external_id: str) -> bool:
        query = select(PairingRequest.approved_at).where(
            PairingRequest.channel == channel, PairingRequest.external_id == external_id
        )
        async with self._sessions() as session:
            return (await session.scalar(query)) is not None

    async def request_pairing(
        self,
        channel: str,
        external_id: str,
        display_name: str,
        *,
        now: datetime,
        ttl: timedelta,
        cap: int,
    ) -> Pairing | None:
        """The person's live pairing code, a fresh one if theirs expired; None when the
        channel already has `cap` codes waiting for an operator."""
        for _ in range(_CREATE_ATTEMPTS):
            try:
                return await self._request_pairing(
                    channel, external_id, display_name, now=now, ttl=ttl, cap=cap
                )
            except IntegrityError:
                # The same person's first two messages raced, or (rarely) a code
                # collided: read again and settle on one row.
                continue
        raise RuntimeError("could not create a pairing request")

    async def _request_pairing(
        self,
        channel: str,
        external_id: str,
        display_name: str,
        *,
        now: datetime,
        ttl: timedelta,
        cap: int,
    ) -> Pairing | None:
        async with self._sessions() as session:
            row = await session.scalar(
                select(PairingRequest).where(
                    PairingRequest.channel == channel, PairingRequest.external_id == external_id
                )
            )
            if row is not None and (row.approved_at is not None or row.expires_at > now):
                return _pairing(row)
            waiting = await session.scalar(
                select(func.count())
                .select_from(PairingRequest)
                .where(
                    PairingRequest.channel == channel,
                    PairingRequest.approved_at.is_(None),
                    PairingRequest.expires_at > now,
                )
            )
            if (waiting or 0) >= cap:
                return None
            if row is None:
                row = PairingRequest(channel=channel, external_id=external_id)
                session.add(row)
            row.display_name = display_name[:200]
            row.code = new_code()
            row.created_at = now
            row.expires_at = now + ttl
            await session.commit()
            return _pairing(row)

    async def pending_pairings(self, *, now: datetime) -> list[Pairing]:
        query = (
            select(PairingRequest)
            .where(PairingRequest.approved_at.is_(None), PairingRequest.expires_at > now)
            .order_by(PairingRequest.created_at, PairingRequest.id)
        )
        async with self._sessions() as session:
            return [_pairing(row) for row in await session.scalars(query)]

    async def approve_pairing(self, code: str, *, now: datetime) -> tuple[Approval, Pairing | None]:
        async with self._sessions() as session:
            row = await session.scalar(
                select(PairingRequest).where(PairingRequest.code == normalise_code(code))
            )
            if row is None:
                return Approval.UNKNOWN, None
            if row.approved_at is not None:
                return Approval.ALREADY_APPROVED, _pairing(row)
            if row.expires_at <= now:
                return Approval.EXPIRED, _pairing(row)
            row.approved_at = now
            await session.commit()
            return Approval.APPROVED, _pairing(row)

    # -- groups -----------------------------------------------------------------------

    async def group_conversation(
        self, channel: str, group_id: str, *, title: str, now: datetime
    ) -> uuid.UUID:
        """The conversation of a group chat, created on its first message."""
        query = select(Conversation.id).where(
            Conversation.channel == channel, Conversation.group_id == group_id
        )
        for _ in range(_CREATE_ATTEMPTS):
            async with self._sessions() as session:
                found = await session.scalar(query)
                if found is not None:
                    return found
                conversation = Conversation(
                    kind=ConversationKind.GROUP,
                    channel=channel,
                    group_id=group_id,
                    title=title[:200],
                    created_at=now,
                )
                session.add(conversation)
                try:
                    await session.commit()
                except IntegrityError:
                    continue  # created meanwhile by a concurrent first message
                return conversation.id
        raise RuntimeError("could not create a group conversation")

    async def group_of(self, conversation_id: uuid.UUID) -> str | None:
        """The platform group id of a group conversation; None for a personal one."""
        query = select(Conversation.kind, Conversation.group_id).where(
            Conversation.id == conversation_id
        )
        async with self._sessions() as session:
            row = (await session.execute(query)).one_or_none()
        if row is None or row.kind != ConversationKind.GROUP:
            return None
        group_id: str | None = row.group_id
        return group_id

    # -- linking ----------------------------------------------------------------------

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
                code = new_code()
                session.add(
                    LinkCode(
                        code=code,
                        user_id=user_id,
                        identity_id=identity_id,
                        created_at=now,
                        expires_at=now + ttl,
                    )
                )
                try:
                    await session.commit()
                except IntegrityError:
                    continue
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
            )
            await session.commit()
            return LinkCheck(LinkStatus.LINKED, check.survivor, check.issuer_channel)

    async def unlink(self, identity_id: uuid.UUID, *, now: datetime) -> UnlinkStatus:
        """Give the identity a person and a conversation of its own again.

        The history stays where it is (with the person's other channels)."""
        async with self._sessions() as session:
            identity = await session.get(Identity, identity_id)
            if identity is None:
                raise LookupError(f"no identity {identity_id}")
            siblings = await session.scalar(
                select(func.count())
                .select_from(Identity)
                .where(Identity.user_id == identity.user_id)
            )
            if (siblings or 0) <= 1:
                return UnlinkStatus.ONLY_IDENTITY
            old_user = await session.get(User, identity.user_id)
            assert old_user is not None
            user = User(
                display_name=identity.display_name, timezone=old_user.timezone, created_at=now
            )
            session.add(user)
            await session.flush()
            session.add(
                Conversation(
                    kind=ConversationKind.PERSONAL,
                    user_id=user.id,
                    title=identity.display_name,
                    created_at=now,
                )
            )
            identity.user_id = user.id
            await session.commit()
            return UnlinkStatus.UNLINKED


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
) -> None:
    absorbed = await session.scalar(
        select(Conversation.id).where(Conversation.user_id == absorbed_user)
    )
    await session.execute(
        update(Identity).where(Identity.user_id == absorbed_user).values(user_id=survivor_user)
    )
    await session.execute(
        update(LinkCode).where(LinkCode.user_id == absorbed_user).values(user_id=survivor_user)
    )
    if absorbed is not None:
        await _merge_conversations(session, survivor, absorbed, answering_message_id)


async def _merge_conversations(
    session: AsyncSession, survivor: uuid.UUID, absorbed: uuid.UUID, answering_message_id: int
) -> None:
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
    await session.execute(delete(Conversation).where(Conversation.id == absorbed))
    await session.execute(
        update(Conversation)
        .where(Conversation.id == survivor)
        .values(
            last_seq=len(order),
            last_user_seq=max(user_seqs, default=0),
            answered_seq=max(was_answered, default=0),
            last_message_at=last_at,
        )
    )


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
