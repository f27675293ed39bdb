"""The Telegram connector against a fake Bot API: webhook secret, payload shapes, media,
edits, groups, typing, replays, polling and webhook registration."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM, Reply
from tests.fakes.telegram_api import WEBHOOK_SECRET
from tests.support.platforms import ADMIN, platform_gateway
from tests.support.polling import eventually


def _user_contents(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")


async def test_a_private_message_is_stored_answered_and_acknowledged(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        response = await p.telegram(tg.text_update(1111111, "Hi! Remember that my cat is Tom."))
        assert response.status_code == 200, response.text
        await p.tg.wait_until(lambda f: f.texts(1111111) == ["reply 1"])
        messages = await eventually(
            p.all_messages, until=lambda ms: len(ms) == 2 and ms[1]["delivery"] == "sent"
        )

    assert "my cat is Tom" in _user_contents(llm.requests[0])
    assert [(m["role"], m["channel"], m["text"]) for m in messages] == [
        ("user", "telegram", "Hi! Remember that my cat is Tom."),
        ("assistant", "telegram", "reply 1"),
    ]
    assert messages[0]["author_name"] == "Test User"
    sent = p.tg.sent(1111111)[0].params
    assert "parse_mode" not in sent  # plain text: model output can't break MarkdownV2


# Each case: the header value sent (None: no header), and the status expected.
FORGED_SECRETS: list[tuple[str, str | None, int]] = [
    ("missing", None, 401),
    ("empty", "", 403),
    ("wrong", "not-the-secret", 403),
    ("prefix", WEBHOOK_SECRET[:-1], 403),
    ("longer", WEBHOOK_SECRET + "x", 403),
    ("case", WEBHOOK_SECRET.upper(), 403),
    ("rotated-away", "old_webhook_secret-0123456789", 403),
    ("bot-token", tg.TOKEN.replace(":", "_"), 403),
    ("doubled", WEBHOOK_SECRET * 2, 403),
    ("one-char-off", WEBHOOK_SECRET[:-1] + ("0" if WEBHOOK_SECRET[-1] != "0" else "1"), 403),
    ("very-long", "a" * 4096, 403),
    ("latin1", "sécret", 403),
]


async def test_forged_secret_tokens_are_refused_and_store_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        outcomes = {}
        for name, secret, _ in FORGED_SECRETS:
            update = tg.text_update(2222, f"forged {name}")
            if secret is not None and not secret.isascii():
                response = await p.gw.http.post(
                    "/webhooks/telegram",
                    content=json.dumps(update).encode(),
                    headers=[(b"X-Telegram-Bot-Api-Secret-Token", secret.encode("latin-1"))],
                )
            else:
                response = await p.telegram(update, secret=secret)
            outcomes[name] = response.status_code
        assert await p.sessions() == []

    assert outcomes == {name: status for name, _, status in FORGED_SECRETS}
    assert llm.requests == []
    assert p.tg.sent() == []


async def test_payload_shapes_get_200_or_4xx_never_500(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    ignored_updates: list[dict[str, Any]] = [
        {
            "update_id": 1,
            "callback_query": {"id": "4382", "from": tg.user(5), "chat_instance": "1", "data": "x"},
        },
        {
            "update_id": 2,
            "my_chat_member": {
                "chat": tg.private_chat(5),
                "from": tg.user(5),
                "date": 1,
                "old_chat_member": {"status": "member", "user": tg.user(5)},
                "new_chat_member": {"status": "kicked", "user": tg.user(5), "until_date": 0},
            },
        },
        {
            "update_id": 3,
            "channel_post": {
                "message_id": 1,
                "date": 1,
                "chat": {"id": -100, "type": "channel", "title": "News"},
                "text": "post",
            },
        },
        {"update_id": 4, "something_telegram_adds_later": {"a": 1}},
        {"update_id": 5},
        tg.text_update(5, "", new_chat_members=[tg.user(6)]),  # a service message
        tg.text_update(7, "no mention here", chat=tg.group_chat()),  # group chatter
    ]
    bad_bodies: list[bytes] = [
        b"not json",
        b"[1, 2, 3]",
        b'"a string"',
        b"{}",
        b'{"update_id": "ten"}',
        b'{"update_id": 1, "message": "hello"}',
        b'{"update_id": 1, "message": {"message_id": 1}}',
        b'{"update_id": 1, "message": {"message_id": 1, "date": "x", "chat": {"id": 1, "type": "private"}}}',
        b"\xff\xfe\x00",
    ]
    async with platform_gateway(database_url, tmp_path, llm) as p:
        ignored = [(await p.telegram(update)).status_code for update in ignored_updates]
        refused = [(await p.telegram(body)).status_code for body in bad_bodies]
        too_big = await p.telegram(b'{"update_id": 1, "x": "' + b"a" * 300_000 + b'"}')
        assert await p.sessions() == []

    assert ignored == [200] * len(ignored_updates)
    assert all(400 <= status < 500 for status in refused), refused
    assert too_big.status_code == 413
    assert llm.requests == []


async def test_videos_and_places_become_labelled_placeholders_and_are_answered(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # Files Parley reads (photos, voice notes, documents) are fetched: test_telegram_media.
    video = tg.text_update(3333, "", message_id=601)
    del video["message"]["text"]
    video["message"] |= {
        "video": {"file_id": "BAAD", "file_unique_id": "AgAD6", "width": 640, "height": 360,
                  "duration": 12},
        "caption": "our new sofa",
    }  # fmt: skip
    place = tg.text_update(3333, "", message_id=602)
    del place["message"]["text"]
    place["message"]["location"] = {"latitude": 48.8584, "longitude": 2.2945}
    async with platform_gateway(database_url, tmp_path, llm) as p:
        assert (await p.telegram(video)).status_code == 200
        await p.tg.wait_until(lambda f: len(f.texts(3333)) == 1)
        assert (await p.telegram(place)).status_code == 200
        await p.tg.wait_until(lambda f: len(f.texts(3333)) == 2)
        messages = await p.all_messages()

    told_video, told_place = (
        llm.requests[0]["messages"][-1]["content"],
        llm.requests[1]["messages"][-1]["content"],
    )
    assert told_video.startswith("[source: telegram video]")
    assert "a video" in told_video
    assert "our new sofa" in told_video
    assert told_place.startswith("[source: telegram location]")
    assert "a location" in told_place
    assert [m["source"] for m in messages if m["role"] == "user"] == [
        "telegram video",
        "telegram location",
    ]


async def test_an_edit_is_a_labelled_event_that_is_not_answered(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        original = tg.text_update(4444, "meet at 5", message_id=77)
        await p.telegram(original)
        await p.tg.wait_until(lambda f: len(f.texts(4444)) == 1)
        edit = tg.edited_update(4444, 77, "meet at 6", edit_date=1_700_000_100)
        for _ in range(2):  # a redelivered edit is stored once
            assert (await p.telegram(edit)).status_code == 200
        await p.telegram(tg.text_update(4444, "see you"))
        await p.tg.wait_until(lambda f: len(f.texts(4444)) == 2)
        messages = await p.all_messages()

    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "meet at 5"),
        ("assistant", "reply 1"),
        ("event", "meet at 6"),
        ("user", "see you"),
        ("assistant", "reply 2"),
    ]
    assert messages[2]["source"] == "telegram edit of an earlier message"
    assert len(llm.requests) == 2
    assert "[source: telegram edit of an earlier message]\nmeet at 6" in _user_contents(
        llm.requests[1]
    )


async def test_groups_answer_mentions_and_replies_only_with_their_own_memory(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    group = tg.group_chat()
    async with platform_gateway(database_url, tmp_path, llm) as p:
        await p.telegram(tg.text_update(5555, "my secret diary entry", first_name="Ann"))
        await p.tg.wait_until(lambda f: len(f.texts(5555)) == 1)

        chatter = await p.telegram(tg.text_update(5555, "lunch anyone?", chat=group))
        mention = tg.mention_update(
            5555, f"@{tg.BOT_USERNAME} what's for dinner?", group, first_name="Ann"
        )
        await p.telegram(mention)
        await p.tg.wait_until(lambda f: len(f.texts(group["id"])) == 1)
        bot_message = p.tg.sent(group["id"])[0]
        reply_to_bot = tg.text_update(
            6666,
            "and dessert?",
            chat=group,
            first_name="Bob",
            reply_to_message={
                "message_id": 1000,
                "from": tg.user(tg.BOT_ID) | {"is_bot": True},
                "chat": group,
                "date": 1,
                "text": "x",
            },
        )
        await p.telegram(reply_to_bot)
        await p.tg.wait_until(lambda f: len(f.texts(group["id"])) == 2)
        sessions = await p.sessions()

    assert chatter.status_code == 200
    group_requests = llm.requests[1:]
    assert len(group_requests) == 2
    for request in group_requests:
        assert "my secret diary entry" not in json.dumps(request)
        assert "lunch anyone?" not in json.dumps(request)
    assert "[from: Ann User]" in _user_contents(group_requests[0])
    assert "[from: Bob User]" in _user_contents(group_requests[1])
    # The group answer quotes the message it answers.
    reply_parameters = bot_message.params["reply_parameters"]
    assert reply_parameters["message_id"] == mention["message"]["message_id"]
    assert sorted(s["kind"] for s in sessions) == ["group", "personal", "personal"]


async def test_typing_is_kept_alive_while_the_model_writes(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    gate, second_gate = asyncio.Event(), asyncio.Event()
    llm.script(Reply("done thinking", gate=gate), Reply("hi", gate=second_gate))
    async with platform_gateway(database_url, tmp_path, llm) as p:
        connector = next(c for c in p.gw.services.connectors if c.channel == "telegram")
        connector.capabilities = dataclasses.replace(connector.capabilities, typing_interval=0.05)
        await p.telegram(tg.text_update(7777, "think hard"))
        await p.tg.wait_until(lambda f: len(f.calls_of("sendChatAction")) >= 3)
        gate.set()
        await p.tg.wait_until(lambda f: f.texts(7777) == ["done thinking"])
        typing_after_reply = len(p.tg.calls_of("sendChatAction"))
        # While another chat's indicator repeats, the first chat's stays stopped.
        await p.telegram(tg.text_update(8888, "hello"))
        await p.tg.wait_until(
            lambda f: sum(c.params["chat_id"] == 8888 for c in f.calls_of("sendChatAction")) >= 3
        )
        second_gate.set()
        await p.tg.wait_until(lambda f: len(f.texts(8888)) == 1)

    first_chat = [c for c in p.tg.calls_of("sendChatAction") if c.params["chat_id"] == 7777]
    assert len(first_chat) <= typing_after_reply
    assert all(c.params["action"] == "typing" for c in first_chat)


async def test_every_update_replayed_three_times_shuffled_is_stored_and_answered_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    people = [9001, 9002, 9003, 9004]
    updates = [tg.text_update(person, f"hello from {person}") for person in people]
    updates.append(tg.edited_update(9001, 42, "an edit", edit_date=1_700_000_500))
    updates.append(
        {"update_id": 777, "callback_query": {"id": "1", "from": tg.user(5), "chat_instance": "1"}}
    )
    deliveries = [update for update in updates for _ in range(3)]
    random.Random(5).shuffle(deliveries)
    async with platform_gateway(database_url, tmp_path, llm) as p:
        statuses = await asyncio.gather(*(p.telegram(u) for u in deliveries))
        await p.tg.wait_until(lambda f: all(len(f.texts(person)) >= 1 for person in people))
        messages = await eventually(
            p.all_messages,
            until=lambda ms: (
                sum(m["role"] == "assistant" and m["delivery"] == "sent" for m in ms) == 4
            ),
        )
        # Wait for one more full turn so a late duplicate would have shown up.
        await p.telegram(tg.text_update(9999, "last"))
        await p.tg.wait_until(lambda f: len(f.texts(9999)) == 1)

    assert {r.status_code for r in statuses} == {200}
    for person in people:
        assert p.tg.texts(person) == [p.tg.texts(person)[0]]
    user_texts = sorted(m["text"] for m in messages if m["role"] == "user")
    assert user_texts == sorted(f"hello from {person}" for person in people)
    assert sum(m["role"] == "event" for m in messages) == 1
    assert len(llm.requests) == 4 + 1


async def test_polling_mode_takes_updates_and_confirms_them_after_storing(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with (
        tg.fake_telegram() as fake,
        platform_gateway(
            database_url,
            tmp_path,
            llm,
            tg=fake,
            telegram_mode="polling",
            telegram_webhook_secret=None,
        ) as p,
    ):
        await fake.push_update(tg.text_update(1212, "polled hello", update_id=500))
        await fake.wait_until(lambda f: f.texts(1212) == ["reply 1"])
        await fake.push_update(tg.text_update(1212, "second", update_id=501))
        await fake.wait_until(lambda f: len(f.texts(1212)) == 2)
        webhook_route = await p.telegram(tg.text_update(1212, "via webhook"))
        stored = {m["text"]: m["created_at"] for m in await p.all_messages()}

    def confirmed(offset: int) -> datetime:
        """When Telegram was first told everything before `offset` was taken."""
        return next(c.at for c in fake.calls_of("getUpdates") if c.params.get("offset") == offset)

    assert fake.calls_of("deleteWebhook")
    # Each update was stored before the poll that confirmed it went out.
    assert datetime.fromisoformat(stored["polled hello"]) < confirmed(501)
    assert datetime.fromisoformat(stored["second"]) < confirmed(502)
    assert webhook_route.status_code == 404  # no webhook route in polling mode
    assert len(llm.requests) == 2


async def test_serve_registers_the_webhook_when_a_public_url_is_set(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(
        database_url, tmp_path, llm, public_url="https://parley.example.org/"
    ) as p:
        pass

    (call,) = p.tg.calls_of("setWebhook")
    assert call.params["url"] == "https://parley.example.org/webhooks/telegram"
    assert call.params["secret_token"] == WEBHOOK_SECRET
    assert call.params["allowed_updates"] == ["message", "edited_message"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"telegram_webhook_secret": None}, "PARLEY_TELEGRAM_WEBHOOK_SECRET is required"),
        ({"telegram_webhook_secret": "has spaces"}, "PARLEY_TELEGRAM_WEBHOOK_SECRET"),
    ],
)
def test_webhook_mode_needs_a_valid_secret(settings: dict[str, Any], message: str) -> None:
    from gateway.errors import ConfigError
    from gateway.settings import load_settings

    values = {"telegram_token": tg.TOKEN, "telegram_webhook_secret": WEBHOOK_SECRET} | settings
    with pytest.raises(ConfigError, match=message) as raised:
        load_settings(_env_file=None, **values)
    assert tg.TOKEN not in str(raised.value)


async def test_one_replica_polls_and_another_takes_over_when_it_stops(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    polling: dict[str, Any] = {
        "telegram_mode": "polling",
        "telegram_webhook_secret": None,
        "turn_lease_seconds": 3,  # leader leases too: the other takes over within a second
    }
    async with tg.fake_telegram() as fake, contextlib.AsyncExitStack() as first:
        await first.enter_async_context(
            platform_gateway(database_url, tmp_path / "a", llm, tg=fake, **polling)
        )
        async with platform_gateway(database_url, tmp_path / "b", llm, tg=fake, **polling) as b:
            await fake.push_update(tg.text_update(3434, "to whoever polls", update_id=700))
            await fake.wait_until(lambda f: len(f.texts(3434)) == 1)
            await first.aclose()  # the replica that polled stops
            await fake.push_update(tg.text_update(3434, "still heard?", update_id=701))
            await fake.wait_until(lambda f: len(f.texts(3434)) == 2, seconds=30)

            async def telegram() -> dict[str, Any]:
                stats: dict[str, Any] = (await b.gw.http.get("/api/v1/stats", headers=ADMIN)).json()
                (channel,) = (c for c in stats["channels"] if c["channel"] == "telegram")
                return {"replica": stats["replica"], **channel}

            # What the health page shows: polling is connected, and held by this replica.
            health = await eventually(
                telegram, until=lambda t: t["connection"] == "connected", interval=0.2
            )

    assert fake.conflicts == 0
    assert len(llm.requests) == 2
    assert health["leader"] == health["replica"]


async def test_the_fake_counts_two_live_pollers_as_a_conflict_and_a_hung_up_one_not() -> None:
    # What makes `conflicts == 0` above worth asserting.
    async with tg.fake_telegram() as fake:
        url = f"{fake.base_url}/bot{fake.token}/getUpdates"
        async with httpx.AsyncClient() as first:
            held = asyncio.create_task(first.post(url, json={"timeout": 10}))
            await fake.wait_until(lambda f: [c.method for c in f.calls] == ["getUpdates"])
            async with httpx.AsyncClient() as second:
                refused = await second.post(url, json={"timeout": 0})
            held.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await held
        # The first client hung up: its poll, still held by the server, polls nothing.
        async with httpx.AsyncClient() as third:
            answered = await third.post(url, json={"timeout": 0})

    assert refused.status_code == 409
    assert answered.status_code == 200
    assert fake.conflicts == 1


async def test_a_group_that_became_a_supergroup_keeps_its_conversation(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    old: dict[str, Any] = {"id": -4001, "type": "group", "title": "Family"}
    new_id = -1009876543210
    supergroup = tg.group_chat(new_id, "Family")
    mention = f"@{tg.BOT_USERNAME} "
    async with platform_gateway(database_url, tmp_path, llm) as p:
        upgraded = tg.TgFail(
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            migrate_to_chat_id=new_id,
        )
        p.tg.fail("sendMessage", upgraded)
        await p.telegram(tg.mention_update(5, mention + "hi", old, first_name="Ann"))
        await p.tg.wait_until(lambda f: len(f.texts(new_id)) == 1)
        # Later messages come from the supergroup's id: the same conversation.
        await p.telegram(tg.mention_update(5, mention + "again", supergroup, first_name="Ann"))
        await p.tg.wait_until(lambda f: len(f.texts(new_id)) == 2)
        groups = [s for s in await p.sessions() if s["kind"] == "group"]

    assert p.tg.texts(old["id"]) == []
    assert len(groups) == 1
    assert groups[0]["message_count"] == 4
    # The second turn remembers the first.
    assert any("hi" in str(m["content"]) for m in llm.requests[1]["messages"])


async def test_the_service_messages_of_a_supergroup_upgrade_move_the_conversation(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    old: dict[str, Any] = {"id": -4002, "type": "group", "title": "Family"}
    new_id = -1005556667770
    supergroup = tg.group_chat(new_id, "Family")
    mention = f"@{tg.BOT_USERNAME} "
    # Telegram's pair, as in the Bot API: one in the old group, one in the new.
    to_new = tg.text_update(5, "", chat=old, first_name="Ann", migrate_to_chat_id=new_id)
    from_old = tg.text_update(5, "", chat=supergroup, migrate_from_chat_id=old["id"])
    for update in (to_new, from_old):
        del update["message"]["text"]
    async with platform_gateway(database_url, tmp_path, llm) as p:
        await p.telegram(tg.mention_update(5, mention + "hi", old, first_name="Ann"))
        await p.tg.wait_until(lambda f: len(f.texts(old["id"])) == 1)
        for update in (to_new, from_old, to_new):  # each may come twice
            assert (await p.telegram(update)).status_code == 200
        # No send failed: the move was learned from the service messages alone.
        await p.telegram(tg.mention_update(5, mention + "again", supergroup, first_name="Ann"))
        await p.tg.wait_until(lambda f: len(f.texts(new_id)) == 1)
        groups = [s for s in await p.sessions() if s["kind"] == "group"]

    assert len(groups) == 1
    assert groups[0]["message_count"] == 4
    assert any("hi" in str(m["content"]) for m in llm.requests[1]["messages"])
