"""Where an answer goes: read in one query (the author's platform address and, in a
group, the group's platform id), or, for a turn started by a message this process
took, as its channel said."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.channels.delivery import DeliveryLoop, RetryPolicy
from gateway.channels.outbox import Outbox
from gateway.channels.port import Connector
from gateway.clock import SystemClock
from gateway.envelopes import ChatRef
from memory.storage.messages import NewMessage
from memory.storage.models import Delivery, Role
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.fakes.recording_platform import RecordingPlatform
from tests.support.platforms import platform_gateway
from tests.support.polling import eventually

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


async def test_a_turn_answers_where_its_message_came_from_without_reading_it_back(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    """Nor, in a private chat (where the reply shows as a draft while written, never
    as a preview message), how its reply's delivery stands: it was stored just now."""
    group = tg.group_chat()
    read_back: list[str] = []
    states: list[str] = []

    def keep(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM conversations LEFT OUTER JOIN identities" in statement:
            read_back.append(statement)
        if statement.startswith("SELECT messages.delivery, messages.delivery_parts_sent"):
            states.append(statement)

    async with platform_gateway(database_url, tmp_path, llm) as p:
        engine = p.gw.services.engine.sync_engine
        event.listen(engine, "before_cursor_execute", keep)
        try:
            await p.telegram(tg.text_update(4242, "hello there", first_name="Ann"))
            await p.tg.wait_until(lambda f: f.texts(4242) == ["reply 1"])
            private_states = len(states)
            mention = tg.mention_update(4242, f"@{tg.BOT_USERNAME} and you all?", group)
            await p.telegram(mention)
            await p.tg.wait_until(lambda f: f.texts(group["id"]) == ["reply 2"])
        finally:
            event.remove(engine, "before_cursor_execute", keep)

    typing = [c.params["chat_id"] for c in p.tg.calls if c.method == "sendChatAction"]
    assert set(typing) == {4242, group["id"]}
    quoted = p.tg.sent(group["id"])[0].params["reply_parameters"]["message_id"]
    assert quoted == mention["message"]["message_id"]
    assert read_back == []
    # The group's reply may replace a preview (edits on): its state is read, preview too.
    assert (private_states, len(states)) == (0, 1)
    assert "stream_previews" in states[0]


async def test_a_chat_kept_for_one_message_never_answers_another_that_took_its_id(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # On SQLite a message's id is used again once the newest rows are erased: a chat
    # kept for the erased one must not take the next message's answer (a reminder's,
    # with no platform id of its own) to the wrong person.
    repos = Repositories.open(sessions, count_tokens=message_tokens, now=lambda: NOW)
    ann = await repos.identities.resolve_identity(
        "telegram", "4242", display_name="Ann", timezone="UTC", now=NOW
    )
    bob = await repos.identities.resolve_identity(
        "telegram", "5151", display_name="Bob", timezone="UTC", now=NOW
    )
    asked, _ = await repos.messages.add_message(
        ann.conversation_id,
        NewMessage(
            Role.USER,
            "telegram",
            "/erase",
            identity_id=ann.identity_id,
            platform_message_id="4242:1",
        ),
        now=NOW,
    )
    reminder, _ = await repos.messages.add_message(
        bob.conversation_id,
        NewMessage(Role.USER, "telegram", "water the plants", identity_id=bob.identity_id),
        now=NOW,
    )
    took_its_id = dataclasses.replace(reminder, id=asked.id)
    reply, _ = await repos.messages.add_message(
        bob.conversation_id,
        NewMessage(
            Role.ASSISTANT,
            "telegram",
            "time to water the plants",
            reply_to_seq=reminder.seq,
            delivery=Delivery.PENDING,
        ),
        now=NOW,
    )
    platform = RecordingPlatform()
    loop = DeliveryLoop(
        deliveries=repos.deliveries, clock=SystemClock(), retry=RetryPolicy(3, 0.01, 0.1)
    )
    outbox = Outbox([cast(Connector, platform)], repos, loop)

    outbox.arrived(asked, ChatRef("telegram", "4242", None, "4242:1"))
    async with outbox.working(took_its_id):
        await asyncio.wait_for(platform.typed.wait(), 10)
    await outbox.deliver(reply, took_its_id)
    await eventually(lambda: _idle(loop), until=bool)  # its part recorded, too
    state = await repos.deliveries.state(reply.id)

    assert platform.typing_in == ["5151"]
    assert platform.sent == [("5151", "time to water the plants")]
    assert state is not None
    assert state.delivery is Delivery.SENT


async def _idle(loop: DeliveryLoop) -> bool:
    return not loop.busy
