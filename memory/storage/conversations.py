"""Repository for conversations: one per person, one per group, and what each owes.

Conversation rows are made here and nowhere else (`personal_conversation`,
`Conversations.group_conversation`).
"""

from __future__ import annotations

import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.engine import read
from memory.storage.inserts import insert_or_skip
from memory.storage.live_window import KeptWindow, LiveWindows
from memory.storage.messages import MESSAGE_ROW, StoredMessage, message_view
from memory.storage.models import Conversation, ConversationKind, Role
from memory.storage.tables import CONVERSATIONS, MESSAGES, USERS


@dataclass(frozen=True, slots=True)
class ConversationView:
    id: uuid.UUID
    kind: ConversationKind
    user_id: uuid.UUID | None
    title: str
    created_at: datetime
    last_message_at: datetime | None
    message_count: int
    owes_reply: bool


@dataclass(frozen=True, slots=True)
class TurnState:
    """What a turn needs from storage, read in one go at its start."""

    conversation_id: uuid.UUID
    timezone: str
    group: bool
    live: tuple[StoredMessage, ...]
    # User messages after the last answered one, oldest first (never empty).
    unanswered: tuple[StoredMessage, ...]
    # When the message before this turn's new messages was sent (None: nothing before).
    previous_at: datetime | None
    # A personal conversation's person (None: a group).
    user_id: uuid.UUID | None = None
    # Their own daily token cap, set by an operator (None: the deployment's).
    daily_tokens: int | None = None
    # The day they were last told the day's tokens are spent.
    budget_notice_on: date | None = None


# Every turn reads these: built once (`memory.storage.tables`).
_TURN_HEAD = (
    select(
        CONVERSATIONS.c.answered_seq,
        CONVERSATIONS.c.last_user_seq,
        CONVERSATIONS.c.kind,
        USERS.c.timezone,
        CONVERSATIONS.c.live_version,
        CONVERSATIONS.c.user_id,
        USERS.c.daily_tokens,
        CONVERSATIONS.c.budget_notice_on,
    )
    .outerjoin(USERS, USERS.c.id == CONVERSATIONS.c.user_id)
    .where(CONVERSATIONS.c.id == bindparam("conversation_id"))
)
# After each turn, on a server database (the turn's lease released).
_OWING = select(CONVERSATIONS.c.id).where(
    CONVERSATIONS.c.id == bindparam("conversation_id"),
    CONVERSATIONS.c.last_user_seq > CONVERSATIONS.c.answered_seq,
)
_LIVE = (
    select(*MESSAGE_ROW)
    .where(
        MESSAGES.c.conversation_id == bindparam("conversation_id"),
        MESSAGES.c.chunk_id.is_(None),
    )
    .order_by(MESSAGES.c.seq)
)
_LIVE_AFTER = _LIVE.where(MESSAGES.c.seq > bindparam("after"))
# When the newest archived message before `before` was sent.
_ARCHIVED_EDGE = (
    select(MESSAGES.c.created_at)
    .where(
        MESSAGES.c.conversation_id == bindparam("conversation_id"),
        MESSAGES.c.seq < bindparam("before"),
    )
    .order_by(MESSAGES.c.seq.desc())
    .limit(1)
)


def personal_conversation(user_id: uuid.UUID, title: str, now: datetime) -> Conversation:
    """A person's own conversation: the one that never resets."""
    return Conversation(
        kind=ConversationKind.PERSONAL, user_id=user_id, title=title, created_at=now
    )


class Conversations:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        windows: LiveWindows | None = None,
    ) -> None:
        """`windows`: where live windows are kept between turns (None: a store of
        this object's own, with the default bounds)."""
        self._sessions = sessions
        self._windows = windows if windows is not None else LiveWindows()

    def keeps_window(self, conversation_id: uuid.UUID) -> bool:
        """Whether this process keeps the conversation's live window (tests)."""
        return conversation_id in self._windows

    def forget_window(self, conversation_id: uuid.UUID) -> None:
        """Drop the kept live window at once (erased text leaves memory too)."""
        self._windows.forget(conversation_id)

    async def owes_reply(self, conversation_id: uuid.UUID) -> bool:
        """Whether a user message of the conversation is still unanswered."""
        params = {"conversation_id": conversation_id}
        return await read(self._sessions, lambda c: c.scalar(_OWING, params) is not None)

    async def conversations_owing_reply(
        self, *, after: uuid.UUID | None = None, limit: int = 500
    ) -> list[uuid.UUID]:
        """Conversations with an unanswered user message, a page at a time by id."""
        query = (
            select(Conversation.id)
            .where(Conversation.last_user_seq > Conversation.answered_seq)
            .order_by(Conversation.id)
            .limit(limit)
        )
        if after is not None:
            query = query.where(Conversation.id > after)
        async with self._sessions() as session:
            return list((await session.scalars(query)).all())

    async def load_turn(self, conversation_id: uuid.UUID) -> TurnState | None:
        """The live window, what the turn answers (every user message after the last
        answered one) and when the message before those was sent; None if nothing is
        unanswered. Of the live window only what is new since the kept one is read
        (live_window.py says when a kept window is good)."""
        return await read(self._sessions, lambda c: self._turn(c, conversation_id))

    def _turn(self, connection: Connection, conversation_id: uuid.UUID) -> TurnState | None:
        answered, last_user, kind, timezone, version, user_id, daily, told = connection.execute(
            _TURN_HEAD, {"conversation_id": conversation_id}
        ).one()
        if last_user <= answered:
            return None
        live = self._live(connection, conversation_id, version)
        # Seq order: what is after `answered` is found without walking the rest.
        after = bisect_right(live, answered, key=_seq)
        unanswered = [m for m in live[after:] if m.role is Role.USER]
        if not unanswered:
            return None
        first_new = unanswered[0]
        before = bisect_left(live, first_new.seq, key=_seq)
        previous_at = live[before - 1].sent_at if before else None
        if previous_at is None and first_new.seq > 1:
            # Everything before this turn is archived: ask the archive's edge.
            previous_at = connection.scalar(
                _ARCHIVED_EDGE, {"conversation_id": conversation_id, "before": first_new.seq}
            )
        return TurnState(
            conversation_id=conversation_id,
            timezone=timezone or "UTC",
            group=kind == ConversationKind.GROUP,
            live=live,
            unanswered=tuple(unanswered),
            previous_at=previous_at,
            user_id=user_id,
            daily_tokens=daily,
            budget_notice_on=told,
        )

    async def budget_told(self, conversation_id: uuid.UUID, day: date) -> None:
        """Remember that the conversation's payer was told on `day` that it is spent."""
        async with self._sessions() as session:
            await session.execute(
                update(Conversation)
                .where(Conversation.id == conversation_id)
                .values(budget_notice_on=day)
            )
            await session.commit()

    def _live(
        self, connection: Connection, conversation_id: uuid.UUID, version: int
    ) -> tuple[StoredMessage, ...]:
        """The live window: the kept one and the messages stored after it, or all of it
        read afresh if none is kept at `version` (read before, so a change committing
        meanwhile leaves the window tagged with the version it outdated)."""
        kept = self._windows.get(conversation_id, version)
        if kept is None:
            rows = connection.execute(_LIVE, {"conversation_id": conversation_id})
        else:
            rows = connection.execute(
                _LIVE_AFTER, {"conversation_id": conversation_id, "after": kept.last_seq}
            )
        new = tuple(message_view(row) for row in rows)
        live = new if kept is None else kept.messages + new
        if kept is None or new:
            self._windows.keep(conversation_id, KeptWindow(version, live))
        return live

    async def list_conversations(
        self, *, limit: int, offset: int, user_id: uuid.UUID | None = None
    ) -> Sequence[ConversationView]:
        query = select(Conversation).order_by(
            Conversation.last_message_at.desc().nulls_last(), Conversation.id
        )
        if user_id is not None:
            query = query.where(Conversation.user_id == user_id)
        async with self._sessions() as session:
            rows = (await session.scalars(query.limit(limit).offset(offset))).all()
        return [conversation_view(row) for row in rows]

    async def get_conversation(self, conversation_id: uuid.UUID) -> ConversationView | None:
        async with self._sessions() as session:
            row = await session.get(Conversation, conversation_id)
        return None if row is None else conversation_view(row)

    async def personal_owner(self, conversation_id: uuid.UUID) -> uuid.UUID | None:
        """The person whose own conversation this is; None for a group."""
        async with self._sessions() as session:
            return await session.scalar(
                select(Conversation.user_id).where(
                    Conversation.id == conversation_id,
                    Conversation.kind == ConversationKind.PERSONAL,
                )
            )

    async def group_conversation(
        self, channel: str, group_id: str, *, title: str, now: datetime
    ) -> uuid.UUID:
        """The conversation of a group chat, created on its first message."""
        query = select(Conversation.id).where(
            Conversation.channel == channel, Conversation.group_id == group_id
        )
        async with self._sessions() as session:
            found = await session.scalar(query)
            if found is not None:
                return found
            # A concurrent first message may create it meanwhile: then this skips.
            await session.execute(
                insert_or_skip(session, Conversation).values(
                    kind=ConversationKind.GROUP,
                    channel=channel,
                    group_id=group_id,
                    title=title[:200],
                    created_at=now,
                )
            )
            await session.commit()
            found = await session.scalar(query)
        if found is None:
            raise LookupError(f"group conversation {channel}:{group_id} vanished")
        return found

    async def move_group(self, channel: str, old_group_id: str, new_group_id: str) -> bool:
        """The platform gave a group a new id (a Telegram group became a supergroup):
        its conversation follows, if it has one (told twice, as Telegram does, it
        moves once). False if the new id has a conversation of its own already: then
        the old one stays where it is."""
        async with self._sessions() as session:
            found = set(
                await session.scalars(
                    select(Conversation.group_id).where(
                        Conversation.channel == channel,
                        Conversation.group_id.in_((old_group_id, new_group_id)),
                    )
                )
            )
            if old_group_id not in found:
                return True  # moved already, or never seen
            if new_group_id in found:
                return False
            await session.execute(
                update(Conversation)
                .where(Conversation.channel == channel, Conversation.group_id == old_group_id)
                .values(group_id=new_group_id)
            )
            await session.commit()
        return True

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


def conversation_view(row: Conversation) -> ConversationView:
    return ConversationView(
        id=row.id,
        kind=row.kind,
        user_id=row.user_id,
        title=row.title,
        created_at=row.created_at,
        last_message_at=row.last_message_at,
        message_count=row.last_seq,
        owes_reply=row.last_user_seq > row.answered_seq,
    )


def _seq(message: StoredMessage) -> int:
    return message.seq
