"""The WhatsApp connector against a fake Graph API: verification, signatures, payload
shapes, placeholders, statuses, the 24-hour window, read receipts and replays."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import random
import time
from pathlib import Path
from typing import Any

from gateway.jobs.memory_jobs import DESCRIBE_SYSTEM
from tests.fakes import graph_api as wa
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support import media
from tests.support.media import VOICE
from tests.support.platforms import platform_gateway
from tests.support.polling import eventually

PERSON = "16505551234"


def _last_user(request: dict[str, Any]) -> str:
    content: str = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
    return content


async def test_subscription_check_echoes_the_challenge_only_for_our_token(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    def query(mode: str, token: str) -> dict[str, str]:
        return {"hub.mode": mode, "hub.verify_token": token, "hub.challenge": "1158201444"}

    async with platform_gateway(database_url, tmp_path, llm) as p:
        ok = await p.gw.http.get("/webhooks/whatsapp", params=query("subscribe", wa.VERIFY_TOKEN))
        refused = [
            await p.gw.http.get("/webhooks/whatsapp", params=params)
            for params in (
                query("subscribe", "wrong"),
                query("unsubscribe", wa.VERIFY_TOKEN),
                query("subscribe", ""),
                {"hub.challenge": "1"},
            )
        ]

    assert ok.status_code == 200
    assert ok.text == "1158201444"
    assert [r.status_code for r in refused] == [403, 403, 403, 403]


async def test_a_text_message_is_stored_with_the_contact_name_and_answered(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        notification = wa.message_notification(
            PERSON, text="Hello from WhatsApp", name="Kerry Fisher"
        )
        response = await p.whatsapp(notification)
        assert response.status_code == 200, response.text
        await p.wa.wait_until(lambda f: f.texts(PERSON) == ["reply 1"])
        messages = await eventually(
            p.all_messages, until=lambda ms: len(ms) == 2 and ms[1]["delivery"] == "sent"
        )

    assert [(m["role"], m["text"], m["channel"]) for m in messages] == [
        ("user", "Hello from WhatsApp", "whatsapp"),
        ("assistant", "reply 1", "whatsapp"),
    ]
    assert messages[0]["author_name"] == "Kerry Fisher"
    sent = p.wa.texts_sent[0]
    assert sent == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": PERSON,
        "type": "text",
        "text": {"preview_url": False, "body": "reply 1"},
    }


def _forged_cases() -> list[tuple[str, bytes, dict[str, str]]]:
    payload = wa.message_notification(PERSON, text="forged")
    body, headers = wa.signed(payload)
    good = headers["X-Hub-Signature-256"]
    digest = good.removeprefix("sha256=")
    reserialised = json.dumps(payload, indent=2).encode()
    content = {"Content-Type": "application/json"}

    def with_signature(value: str, data: bytes = body) -> tuple[bytes, dict[str, str]]:
        return data, content | {"X-Hub-Signature-256": value}

    other_secret = hmac.new(b"another-app-secret", body, hashlib.sha256).hexdigest()
    sha1 = hmac.new(wa.APP_SECRET.encode(), body, hashlib.sha1).hexdigest()
    return [
        ("missing", body, content),
        *[
            (name, *with_signature(value))
            for name, value in [
                ("empty", ""),
                ("prefix-only", "sha256="),
                ("no-prefix", digest),
                ("sha1", f"sha1={sha1}"),
                ("other-secret", f"sha256={other_secret}"),
                ("truncated", good[:-2]),
                ("trailing", good + "00"),
                ("one-digit-off", good[:-1] + ("0" if good[-1] != "0" else "1")),
                ("two-signatures", f"{good},{good}"),
                ("not-hex", "sha256=" + "zz" * 32),
            ]
        ],
        ("body-changed", *with_signature(good, body.replace(b"forged", b"FORGED"))),
        ("reserialised", *with_signature(good, reserialised)),
        ("appended", *with_signature(good, body + b" ")),
    ]


async def test_forged_signatures_are_refused_and_store_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    cases = _forged_cases()
    async with platform_gateway(database_url, tmp_path, llm) as p:
        outcomes = {}
        for name, body, headers in cases:
            response = await p.gw.http.post("/webhooks/whatsapp", content=body, headers=headers)
            outcomes[name] = response.status_code
        assert await p.sessions() == []

    assert len(cases) >= 10
    assert outcomes == {name: 401 if name in ("missing", "empty") else 403 for name, _, _ in cases}
    assert llm.requests == []
    assert p.wa.texts_sent == []


async def test_payload_shapes_get_200_or_4xx_never_500(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    message = wa.message_notification(PERSON, text="x")
    other_number = json.loads(json.dumps(message))
    other_number["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999"
    ignored: list[dict[str, Any]] = [
        {"object": "page", "entry": []},
        {"object": "whatsapp_business_account"},
        {"object": "whatsapp_business_account", "entry": "nope"},
        {
            "object": "whatsapp_business_account",
            "entry": [{"changes": [{"field": "messages", "value": 3}]}],
        },
        wa.envelope({"name": "x"}, field="account_update"),
        wa.envelope({"messages": [{"from": PERSON, "type": "text"}]}),  # no id
        wa.envelope(
            {
                "messages": [
                    {
                        "id": "wamid.x",
                        "from": PERSON,
                        "type": "system",
                        "system": {"body": "changed"},
                    }
                ]
            }
        ),
        wa.envelope({"statuses": [{"id": "wamid.unknown", "status": "delivered"}]}),
        wa.envelope({"statuses": [{"id": 5, "status": "teleported"}]}),
        other_number,
    ]
    bad: list[bytes] = [b"not json", b"[]", b'"text"', b"\xff\xfe"]
    async with platform_gateway(database_url, tmp_path, llm) as p:
        ignored_statuses = [(await p.whatsapp(payload)).status_code for payload in ignored]
        bad_statuses = [(await p.whatsapp(body)).status_code for body in bad]
        too_big = await p.whatsapp(b'{"object": "' + b"a" * 300_000 + b'"}')
        assert await p.sessions() == []

    assert ignored_statuses == [200] * len(ignored)
    assert all(400 <= status < 500 for status in bad_statuses), bad_statuses
    assert too_big.status_code == 413
    assert llm.requests == []


async def test_photos_and_voice_notes_are_fetched_other_media_become_placeholders(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    image = {"caption": "look at this", "mime_type": "image/jpeg", "sha256": "abc", "id": "MEDIA_1"}
    voice = {"mime_type": "audio/ogg; codecs=opus", "sha256": "def", "id": "MEDIA_2", "voice": True}
    video = {"caption": "and this", "mime_type": "video/mp4", "sha256": "ghi", "id": "MEDIA_3"}
    llm.transcripts.append("see you at noon")
    async with wa.fake_graph() as fake:
        fake.media |= {"MEDIA_1": media.photo(), "MEDIA_2": VOICE}
        fake.expire_downloads = 1  # the first URL is stale by the time it is used
        async with platform_gateway(database_url, tmp_path, llm, wa=fake) as p:
            await p.whatsapp(wa.message_notification(PERSON, "image", body=image))
            await p.wa.wait_until(lambda f: len(f.texts(PERSON)) == 1)
            reaction = {"message_id": wa.new_wamid(), "emoji": "\N{THUMBS UP SIGN}"}
            await p.whatsapp(wa.message_notification(PERSON, "reaction", body=reaction))
            await p.whatsapp(wa.message_notification(PERSON, "audio", body=voice))
            await p.wa.wait_until(lambda f: len(f.texts(PERSON)) == 2)
            await p.whatsapp(wa.message_notification(PERSON, "video", body=video))
            await p.wa.wait_until(lambda f: len(f.texts(PERSON)) == 3)
            messages = await p.all_messages()

    # The photo's URL asked for again once it had expired, with the token each time.
    assert fake.media_lookups == ["MEDIA_1", "MEDIA_1", "MEDIA_2"]
    assert fake.downloads == ["MEDIA_1", "MEDIA_1", "MEDIA_2"]
    # The turns' requests (the photo's description is asked beside them).
    photo, said, shown = (r for r in llm.requests if r["messages"][0]["content"] != DESCRIBE_SYSTEM)
    words, image_part = photo["messages"][-1]["content"]
    assert words["text"].endswith("look at this\n[image 120×80, not described]")
    assert len(media.shown_image(image_part).getexif()) == 0
    assert _last_user(said) == "[source: voice note, transcribed]\nsee you at noon"
    assert _last_user(shown).startswith("[source: whatsapp video]")
    assert "and this" in _last_user(shown)
    users = [m for m in messages if m["role"] != "assistant"]
    assert [(m["role"], m["source"]) for m in users] == [
        ("user", None),
        ("event", "whatsapp reaction"),
        ("user", None),
        ("user", "whatsapp video"),
    ]
    assert [a["kind"] for m in users for a in m["attachments"]] == ["image", "audio"]


async def test_statuses_move_delivery_forward_in_any_order(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        await p.whatsapp(wa.message_notification(PERSON, text="hi"))
        await p.wa.wait_until(lambda f: len(f.texts_sent) == 1)
        await eventually(p.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent")
        ours = p.wa.wamid_of(0)
        for status in ("read", "delivered", "sent"):  # out of order, as Meta warns
            assert (
                await p.whatsapp(wa.status_notification(ours, status, PERSON))
            ).status_code == 200
        after_read = (await p.all_messages())[-1]

        await p.whatsapp(wa.message_notification(PERSON, text="again"))
        await p.wa.wait_until(lambda f: len(f.texts_sent) == 2)
        await eventually(p.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent")
        error = {
            "code": 131026,
            "title": "Message undeliverable",
            "error_data": {"details": "Receiver is incapable"},
        }
        await p.whatsapp(wa.status_notification(p.wa.wamid_of(1), "failed", PERSON, [error]))
        after_failure = (await p.all_messages())[-1]

    assert after_read["delivery"] == "read"
    assert after_failure["delivery"] == "failed"
    assert after_failure["delivery_error"] == "WhatsApp error 131026: Receiver is incapable"


async def test_outside_the_24_hour_window_the_reply_is_recorded_undeliverable(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    long_ago = int(time.time()) - 25 * 3600  # a notification retried for a day
    async with platform_gateway(database_url, tmp_path, llm) as p:
        await p.whatsapp(wa.message_notification(PERSON, text="late", timestamp=long_ago))
        messages = await eventually(
            p.all_messages, until=lambda ms: len(ms) == 2 and ms[1]["delivery"] == "failed"
        )

    assert p.wa.texts_sent == []
    assert p.wa.attempts == 0
    assert "24-hour window" in messages[1]["delivery_error"]


async def test_the_message_is_marked_read_with_typing_while_the_model_writes(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("answer", gate=gate))
    wamid = wa.new_wamid()
    async with platform_gateway(database_url, tmp_path, llm) as p:
        await p.whatsapp(wa.message_notification(PERSON, text="think", wamid=wamid))
        await p.wa.wait_until(lambda f: len(f.reads) >= 1)
        assert p.wa.texts_sent == []
        gate.set()
        await p.wa.wait_until(lambda f: f.texts(PERSON) == ["answer"])

    assert p.wa.reads[0] == {
        "messaging_product": "whatsapp",
        "status": "read",
        "message_id": wamid,
        "typing_indicator": {"type": "text"},
    }


async def test_every_notification_replayed_three_times_shuffled_is_stored_and_answered_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    people = ["15550000001", "15550000002", "15550000003"]
    notifications = [wa.message_notification(person, text=f"hi from {person}") for person in people]
    notifications.append(
        wa.message_notification(people[0], "reaction", body={"message_id": "wamid.x", "emoji": "x"})
    )
    deliveries = [n for n in notifications for _ in range(3)]
    random.Random(7).shuffle(deliveries)
    async with platform_gateway(database_url, tmp_path, llm) as p:
        statuses = await asyncio.gather(*(p.whatsapp(n) for n in deliveries))
        await p.wa.wait_until(lambda f: all(f.texts(person) for person in people))
        await eventually(
            p.all_messages,
            until=lambda ms: (
                sum(m["role"] == "assistant" and m["delivery"] == "sent" for m in ms) == 3
            ),
        )
        await p.whatsapp(wa.message_notification("15550000009", text="last"))
        await p.wa.wait_until(lambda f: len(f.texts("15550000009")) == 1)
        messages = await p.all_messages()

    assert {r.status_code for r in statuses} == {200}
    for person in people:
        assert len(p.wa.texts(person)) == 1
    assert sorted(m["text"] for m in messages if m["role"] == "user") == sorted(
        [f"hi from {person}" for person in people] + ["last"]
    )
    assert sum(m["role"] == "event" for m in messages) == 1
    assert len(llm.requests) == 4
