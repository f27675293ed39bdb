"""What storing a turn's reply leaves in the database, on SQLite (one transaction) and on
Postgres (one statement): the reply under the next seq with the turn's usage charged,
only while the turn's lease is still its holder's, and nothing at all otherwise."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.model_usage import Usage
from memory.storage.leases import LeaseLost
from memory.storage.messages import ConversationGone, NewMessage, StoredMessage
from memory.storage.models import Delivery, Role, UsageKind
from memory.storage.repositories import Repositories
from memory.storage.usage_days import Payer, UsageRow
from memory.token_count import message_tokens
from tests.support.clock import ManualClock

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=30)
LEASE = "turn:test"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
def repos(sessions: async_sessionmaker[AsyncSession], clock: ManualClock) -> Repositories:
    return Repositories.open(sessions, count_tokens=message_tokens, now=clock.now, holder="me")


def _reply(conversation_id: uuid.UUID, asked: StoredMessage, *usage: Usage) -> NewMessage:
    return NewMessage(
        Role.ASSISTANT,
        "telegram",
        "here is what I found",
        reply_to_seq=asked.seq,
        delivery=Delivery.PENDING,
        model="small",
        usage=usage,
        payer=Payer(conversation_id, True, "UTC"),
    )


async def _asked(repos: Repositories) -> StoredMessage:
    ref = await repos.identities.resolve_identity(
        "telegram", "9", display_name="Di", timezone="UTC", now=NOW
    )
    asked, _ = await repos.messages.add_message(
        ref.conversation_id,
        NewMessage(Role.USER, "telegram", "what did you find?", platform_message_id="9:1"),
        now=NOW,
    )
    return asked


async def _usage(repos: Repositories, subject: uuid.UUID) -> list[UsageRow]:
    return await repos.usage.rows(date(2026, 3, 1), date(2026, 3, 1), subject)


async def test_a_reply_under_its_lease_takes_the_next_seq_and_charges_each_model(
    repos: Repositories,
) -> None:
    asked = await _asked(repos)
    conversation = asked.conversation_id
    assert await repos.leases.claim(LEASE, TTL)

    reply, created = await repos.messages.add_message(
        conversation,
        _reply(
            conversation,
            asked,
            Usage(100, 40, 20, "small"),
            Usage(30, 0, 5, "large"),
            Usage(50, 10, 10, "small"),
        ),
        now=NOW,
        held=repos.leases.held(LEASE),
    )
    owed = await repos.conversations.load_turn(conversation)

    assert created
    assert (reply.seq, reply.role, reply.reply_to_seq, reply.delivery) == (
        asked.seq + 1,
        Role.ASSISTANT,
        asked.seq,
        Delivery.PENDING,
    )
    assert reply.token_count == message_tokens("here is what I found")
    assert await repos.messages.messages_after(conversation, 0, 10) == [asked, reply]
    assert owed is None  # answered
    assert [
        (r.model, r.kind, r.calls, r.prompt, r.cached, r.completion)
        for r in await _usage(repos, conversation)
    ] == [
        ("large", UsageKind.TURN, 1, 30, 0, 5),
        ("small", UsageKind.TURN, 2, 150, 50, 30),
    ]
    # A second reply adds to the day's rows.
    await repos.messages.add_message(
        conversation,
        _reply(conversation, asked, Usage(1, 0, 1, "small")),
        now=NOW,
        held=repos.leases.held(LEASE),
    )
    assert [(r.model, r.calls, r.prompt) for r in await _usage(repos, conversation)] == [
        ("large", 1, 30),
        ("small", 3, 151),
    ]


@pytest.mark.parametrize("how", ["taken", "lapsed", "released"])
async def test_a_reply_whose_lease_is_no_longer_its_holders_stores_and_charges_nothing(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession], clock: ManualClock, how: str
) -> None:
    asked = await _asked(repos)
    conversation = asked.conversation_id
    assert await repos.leases.claim(LEASE, TTL)
    held = repos.leases.held(LEASE)
    if how == "taken":
        clock.advance(TTL + timedelta(seconds=1))
        other = Repositories.open(sessions, count_tokens=message_tokens, now=clock.now)
        assert await other.leases.claim(LEASE, TTL)
    elif how == "lapsed":
        clock.advance(TTL + timedelta(seconds=1))
    else:
        await repos.leases.release(LEASE)

    with pytest.raises(LeaseLost):
        await repos.messages.add_message(
            conversation,
            _reply(conversation, asked, Usage(100, 0, 20, "small")),
            now=clock.now(),
            held=held,
        )
    # The seq it would have taken goes to the next message.
    after, _ = await repos.messages.add_message(
        conversation,
        NewMessage(Role.USER, "telegram", "hello?", platform_message_id="9:2"),
        now=NOW,
    )
    state = await repos.conversations.load_turn(conversation)

    assert await repos.messages.messages_after(conversation, 0, 10) == [asked, after]
    assert after.seq == asked.seq + 1
    assert state is not None
    assert state.unanswered == (asked, after)
    assert await _usage(repos, conversation) == []


async def test_a_reply_to_a_conversation_erased_meanwhile_stores_and_charges_nothing(
    repos: Repositories,
) -> None:
    asked = await _asked(repos)
    conversation = asked.conversation_id
    assert await repos.leases.claim(LEASE, TTL)
    assert await repos.erasure.delete_conversation(conversation, now=NOW) is not None

    with pytest.raises(ConversationGone):
        await repos.messages.add_message(
            conversation,
            _reply(conversation, asked, Usage(100, 0, 20, "small")),
            now=NOW,
            held=repos.leases.held(LEASE),
        )
    assert await _usage(repos, conversation) == []
