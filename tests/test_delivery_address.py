"""Where an answer goes, read in one query: the author's platform address and, in a
group, the group's platform id."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.repositories import Repositories
from memory.token_count import message_tokens

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def test_a_private_chat_goes_to_its_author_and_a_group_to_the_group(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    repos = Repositories.open(sessions, count_tokens=message_tokens, now=lambda: NOW)
    ann = await repos.identities.resolve_identity(
        "telegram", "4242", display_name="Ann", timezone="UTC", now=NOW
    )
    group = await repos.conversations.group_conversation(
        "telegram", "-100777", title="Family", now=NOW
    )
    deliveries = repos.deliveries

    assert await deliveries.address(ann.conversation_id, ann.identity_id) == ("4242", None)
    assert await deliveries.address(group, ann.identity_id) == ("4242", "-100777")
    # An operator's message has no author; a conversation erased meanwhile, no address.
    assert await deliveries.address(group, None) == ("", "-100777")
    assert await deliveries.address(uuid.uuid4(), ann.identity_id) == ("", None)
