"""First contacts that race: one row wins, every caller gets it, nothing is half-made.

Each repository creates under a unique key with INSERT … ON CONFLICT DO NOTHING; these
start many of the same first writes at once, on SQLite and on Postgres.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.deliveries import NotPending
from memory.storage.messages import NewMessage
from memory.storage.models import (
    Conversation,
    ConversationKind,
    Delivery,
    Role,
    SentPart,
    User,
)
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RACERS = 8


@pytest.fixture
def repos(sessions: async_sessionmaker[AsyncSession]) -> Repositories:
    return Repositories.open(sessions, count_tokens=message_tokens, now=lambda: NOW)


async def _count(sessions: async_sessionmaker[AsyncSession], query: Select[Any]) -> int:
    async with sessions() as session:
        return await session.scalar(query) or 0


async def test_one_person_is_made_of_racing_first_messages(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    refs = await asyncio.gather(
        *(
            repos.identities.resolve_identity(
                "telegram", "42", display_name="Ada", timezone="UTC", now=NOW
            )
            for _ in range(RACERS)
        )
    )

    assert len(set(refs)) == 1
    assert await _count(sessions, select(func.count()).select_from(User)) == 1
    assert await _count(sessions, select(func.count()).select_from(Conversation)) == 1


async def test_one_group_conversation_is_made_of_racing_first_messages(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    ids = await asyncio.gather(
        *(
            repos.conversations.group_conversation("telegram", "-100", title="Team", now=NOW)
            for _ in range(RACERS)
        )
    )

    assert len(set(ids)) == 1
    groups = (
        select(func.count())
        .select_from(Conversation)
        .where(Conversation.kind == ConversationKind.GROUP)
    )
    assert await _count(sessions, groups) == 1


async def test_a_redelivered_message_is_stored_once_and_takes_no_seq(
    repos: Repositories,
) -> None:
    ref = await repos.identities.resolve_identity(
        "whatsapp", "4915", display_name="Bo", timezone="UTC", now=NOW
    )
    new = NewMessage(
        role=Role.USER,
        channel="whatsapp",
        text="hello",
        identity_id=ref.identity_id,
        platform_message_id="wamid.1",
    )

    results = await asyncio.gather(
        *(repos.messages.add_message(ref.conversation_id, new, now=NOW) for _ in range(RACERS))
    )
    after = await repos.messages.add_message(
        ref.conversation_id,
        NewMessage(role=Role.USER, channel="whatsapp", text="next", platform_message_id="wamid.2"),
        now=NOW,
    )

    assert sorted(created for _, created in results) == [False] * (RACERS - 1) + [True]
    assert {message.id for message, _ in results} == {results[0][0].id}
    assert results[0][0].seq == 1
    assert after[0].seq == 2  # the skipped inserts gave their seqs back


async def test_racing_pairing_requests_settle_on_one_code(repos: Repositories) -> None:
    pairings = await asyncio.gather(
        *(
            repos.pairings.request_pairing(
                "telegram", "7", "Cy", now=NOW, ttl=timedelta(minutes=30), cap=10
            )
            for _ in range(RACERS)
        )
    )

    assert all(p is not None for p in pairings)
    assert len({p.code for p in pairings if p is not None}) == 1
    waiting = await repos.pairings.pending_pairings(now=NOW)
    assert [p.external_id for p in waiting] == ["7"]

    # Expired, it is replaced by a fresh code rather than a second row.
    later = NOW + timedelta(hours=1)
    renewed = await repos.pairings.request_pairing(
        "telegram", "7", "Cy", now=later, ttl=timedelta(minutes=30), cap=10
    )
    first = pairings[0]
    assert renewed is not None
    assert first is not None
    assert renewed.code != first.code
    assert [p.code for p in await repos.pairings.pending_pairings(now=later)] == [renewed.code]


async def test_a_part_recorded_twice_is_counted_once(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    ref = await repos.identities.resolve_identity(
        "telegram", "9", display_name="Di", timezone="UTC", now=NOW
    )
    reply, _ = await repos.messages.add_message(
        ref.conversation_id,
        NewMessage(
            role=Role.ASSISTANT,
            channel="telegram",
            text="a long answer",
            delivery=Delivery.PENDING,
        ),
        now=NOW,
    )

    await repos.deliveries.sending(reply.id, 0)
    await repos.deliveries.part_sent(reply.id, 0, "telegram", "9:100", now=NOW)
    with pytest.raises(NotPending):  # the same part again, from a sender that stalled
        await repos.deliveries.part_sent(reply.id, 0, "telegram", "9:100", now=NOW)

    state = await repos.deliveries.state(reply.id)
    assert state is not None
    assert state.parts_sent == 1
    assert await _count(sessions, select(func.count()).select_from(SentPart)) == 1
