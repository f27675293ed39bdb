"""A sender seen for the first time: their person, identity and own conversation, as one
transaction on SQLite and one statement on Postgres, with every column as the rest of
Parley expects it (the server's defaults where the statement leaves them)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.engine import dialect_of
from memory.storage.models import Conversation, ConversationKind, Identity, User
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def repos(sessions: async_sessionmaker[AsyncSession]) -> Repositories:
    return Repositories.open(sessions, count_tokens=message_tokens, now=lambda: NOW)


async def test_a_first_contact_makes_a_person_an_identity_and_their_conversation(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    engine = sessions.kw["bind"].sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        ref = await repos.identities.resolve_identity(
            "telegram", "42", display_name="Ada", timezone="Europe/Paris", now=NOW
        )
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    again = await repos.identities.resolve_identity(
        "telegram", "42", display_name="Ada", timezone="UTC", now=NOW
    )

    async with sessions() as session:
        user = await session.get(User, ref.user_id)
        identity = await session.get(Identity, ref.identity_id)
        conversation = await session.scalar(
            select(Conversation).where(Conversation.user_id == ref.user_id)
        )
    assert again == ref
    assert user is not None
    assert identity is not None
    assert conversation is not None
    assert (user.display_name, user.timezone, user.follow_ups, user.daily_tokens) == (
        "Ada",
        "Europe/Paris",
        True,
        None,
    )
    assert (identity.channel, identity.external_id, identity.user_id) == (
        "telegram",
        "42",
        user.id,
    )
    assert (identity.display_name, identity.seen_seq) == ("Ada", 0)
    assert (conversation.id, conversation.kind, conversation.title) == (
        ref.conversation_id,
        ConversationKind.PERSONAL,
        "Ada",
    )
    assert (conversation.channel, conversation.group_id) == (None, None)
    seqs = (conversation.last_seq, conversation.last_user_seq, conversation.answered_seq)
    assert seqs == (0, 0, 0)
    assert conversation.live_version == 0
    # The lookup that missed, then the writes: one statement on Postgres.
    writes = statements[1:]
    assert len(writes) == (1 if dialect_of(sessions) == "postgresql" else 3), writes
