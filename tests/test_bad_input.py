"""Every bad input of the hostile-client review gets a clear 4xx (our APIs) or is cleaned
and stored (signed platform input); none gets a 500 or drops a socket."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import structlog
from fastapi import FastAPI
from websockets.asyncio.client import ClientConnection, connect

from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Gateway, make_settings, next_frame, running_gateway
from tests.support.platforms import ADMIN, platform_gateway
from tests.support.polling import eventually
from tests.support.servers import serve

NUL = "a\x00b"
SURROGATE = "x\ud800y"
TOO_BIG = 2**63
HUGE = 2**64 + 1
NAN, INF = float("nan"), float("inf")


def _json_bytes(value: Any) -> bytes:
    # ASCII escapes, as platforms send them: a lone surrogate cannot be UTF-8.
    return json.dumps(value).encode()


async def _still_usable(websocket: ClientConnection) -> None:
    await websocket.send(json.dumps({"type": "resume", "after_seq": 0}))
    await websocket.send(json.dumps({"type": "message", "text": "still here", "client_id": "ok"}))
    assert (await next_frame(websocket, "ack"))["client_id"] == "ok"


async def _texts(gw: Gateway, token: str) -> list[str]:
    return [m["text"] for m in await gw.history(token)]


async def test_bad_text_numbers_and_tokens_get_422_or_401_and_store_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    bodies = [
        _json_bytes({"text": NUL}),
        _json_bytes({"text": SURROGATE}),
        _json_bytes({"text": "a\uffffb"}),
        b'{"text": NaN}',
        b'{"text": Infinity}',
        b'{"text": "hi", "client_id": 1e999999}',
        b'{"text": "hi", "client_id": 5}',
        _json_bytes({"text": "hi", "\ud800": 1}),
        b"[" * 100_000,
    ]
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, conversation = await gw.visitor()
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        answers = [
            await gw.http.post("/webchat/messages", content=body, headers=auth) for body in bodies
        ]
        history = await gw.http.get(
            "/webchat/messages", params={"after_seq": TOO_BIG}, headers=auth
        )
        pages = [
            await gw.http.get("/api/v1/sessions", params={"limit": TOO_BIG}, headers=ADMIN),
            await gw.http.get(
                f"/api/v1/sessions/{conversation}/messages",
                params={"after_seq": TOO_BIG},
                headers=ADMIN,
            ),
        ]
        non_ascii = await gw.http.post(
            "/webchat/messages",
            content=b'{"text": "hi"}',
            headers=[
                (b"authorization", b"Bearer wc1.x.\xe9"),
                (b"content-type", b"application/json"),
            ],
        )
        stored = await _texts(gw, token)

    assert [a.status_code for a in answers[:-1]] == [422] * (len(bodies) - 1), [
        a.text for a in answers
    ]
    assert 400 <= answers[-1].status_code < 500
    assert "NUL" in answers[0].text
    assert "unicode" in answers[1].text.lower()
    assert history.status_code == 422
    assert [p.status_code for p in pages] == [422, 422]
    assert non_ascii.status_code == 401
    assert stored == []
    assert llm.requests == []


async def test_the_socket_answers_every_bad_frame_and_stays_usable(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    frames: list[str | bytes] = [
        b"\x00\x01binary",
        "not json",
        "[" * 3000,
        json.dumps({"type": "message", "text": NUL}),
        json.dumps({"type": "message", "text": SURROGATE}),
        '{"type": "message", "text": NaN}',
        json.dumps({"type": "resume", "after_seq": TOO_BIG}),
        json.dumps({"type": "resume", "after_seq": "5"}),
        json.dumps({"type": "message", "text": "hi", "extra": 1}),
        json.dumps({"type": "message", "text": "x" * 5000}),
        # Fewer characters than the limit, more bytes: the limit is in bytes.
        json.dumps({"type": "message", "text": "é" * 3000}, ensure_ascii=False),
    ]
    settings = make_settings(database_url, tmp_path, llm, max_body_bytes=4096)
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        async with gw.socket(token) as websocket:
            errors = []
            for frame in frames:
                await websocket.send(frame)
                errors.append(await next_frame(websocket))
            await _still_usable(websocket)
        bad_token = gw.url.replace("http", "ws", 1) + "/webchat/ws?token=wc1.x.%C3%A9"
        async with connect(bad_token) as websocket:
            unauthorized = await next_frame(websocket)

    assert [e["type"] for e in errors] == ["error"] * len(frames)
    codes = [e["code"] for e in errors]
    assert codes == ["bad_frame"] * 9 + ["too_large"] * 2, errors
    assert "NUL" in errors[3]["detail"]
    assert unauthorized["code"] == "unauthorized"


async def test_a_client_gone_without_a_word_mid_message_is_no_error_and_loses_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(database_url, tmp_path, llm)
    async with running_gateway(settings) as gw:
        # A person a socket: sockets of one person get each other's events, and a socket
        # closed with some still unread ends with a reset, which may drop its own frame
        # still in the server's buffer (TCP's loss, not the gateway's; an unacked message
        # is the client's to send again).
        tokens = [(await gw.visitor())[0] for _ in range(10)]
        for i, token in enumerate(tokens):
            async with gw.socket(token) as websocket:
                await websocket.send(
                    json.dumps({"type": "message", "text": f"gone {i}", "client_id": str(i)})
                )
                # No close frame: the connection just ends.
                websocket.transport.close()
        # Every message stored, and answered.
        histories = [
            await eventually(
                functools.partial(gw.history, token),
                until=lambda ms: len(ms) == 2 and ms[-1]["role"] == "assistant",
                seconds=30,
            )
            for token in tokens
        ]

    assert [history[0]["text"] for history in histories] == [f"gone {i}" for i in range(10)]
    # Its ack (or the reply streamed to it) found the socket closed: that ends the socket
    # like any disconnect, and is no error of the server's.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("policy", ["pairing", "allowlist"])
async def test_a_refusal_reaches_the_socket_as_an_error_frame(
    database_url: str, tmp_path: Path, llm: FakeLLM, policy: str
) -> None:
    settings = make_settings(database_url, tmp_path, llm, webchat_policy=policy)
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        async with gw.socket(token) as websocket:
            await websocket.send(json.dumps({"type": "message", "text": "hi", "client_id": "c1"}))
            refused = await next_frame(websocket)
            await websocket.send(json.dumps({"type": "resume", "after_seq": 0}))
            await websocket.send(json.dumps({"type": "message", "text": "again"}))
            again = await next_frame(websocket, "error")
        stored = await _texts(gw, token)

    assert refused["type"] == "error"
    assert refused["code"] == "refused"
    assert refused["client_id"] == "c1"
    expected = "pairing code" if policy == "pairing" else "not on its list"
    assert expected in refused["detail"]
    assert again["code"] == "refused"
    assert stored == []
    assert llm.requests == []


async def test_signed_platform_input_with_bad_text_is_cleaned_stored_and_acknowledged(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        nameless = tg.text_update(13, "a\ufdd0b", first_name="\x00")
        del nameless["message"]["from"]["last_name"]
        telegram = [
            await p.telegram(_json_bytes(tg.text_update(11, NUL))),
            await p.telegram(_json_bytes(tg.text_update(12, SURROGATE, first_name="\ud800A\x00"))),
            await p.telegram(_json_bytes(nameless)),
            await p.telegram(b'{"update_id": 99, "message": "\xff\xfe"}'),
        ]
        whatsapp = [
            await p.whatsapp(_json_bytes(wa.message_notification("15550001", text=NUL))),
            await p.whatsapp(
                _json_bytes(wa.message_notification("1555\ud8000002", text="hello", name="\x00"))
            ),
            # Postgres refuses what is wider than the column: names are cut, ids never.
            await p.whatsapp(wa.message_notification("15550003", text="long", name="N" * 300)),
            await p.whatsapp(wa.message_notification("15550004", text="skip", wamid="w" * 300)),
        ]
        messages = await p.all_messages()

    assert [r.status_code for r in telegram[:3] + whatsapp] == [200] * 7
    assert 400 <= telegram[3].status_code < 500
    users = sorted(
        (m["channel"], m["text"], m["author_name"]) for m in messages if m["role"] == "user"
    )
    assert users == [
        ("telegram", "ab", "Test User"),
        ("telegram", "a\ufffdb", ""),
        ("telegram", "x\ufffdy", "\ufffdA User"),
        ("whatsapp", "ab", "Kerry Fisher"),
        ("whatsapp", "hello", ""),
        ("whatsapp", "long", "N" * 200),
    ]


async def test_signed_platform_input_with_numbers_no_column_holds_is_stored_and_acknowledged(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    """NaN, ±Infinity and integers past 64 bits inside a correctly signed update: where
    Parley does not read them, the message is stored; a time it cannot read, it stores
    the message without; an id it cannot read makes it ignore the update with a log
    line. Every answer is a 200 (a retry would carry the same numbers); the secret and
    the signature are still checked, over the raw bytes. Our own API still refuses."""
    unread = tg.text_update(31, "unread numbers", sender_boost_count=NAN, paid_star_count=HUGE)
    unread["message"]["from"]["added_to_attachment_menu"] = -HUGE
    photo = tg.photo_update(32, "a caption")
    photo["message"]["photo"][0] |= {"width": INF, "height": -INF, "file_size": 10**30}
    edit = tg.text_update(34, "edited text")
    edit["message"]["edit_date"] = INF
    edit["edited_message"] = edit.pop("message")
    undated = tg.text_update(33, "no date")
    undated["message"]["date"] = NAN
    no_sender = tg.text_update(38, "sender id is NaN")
    no_sender["message"]["from"]["id"] = NAN
    # More digits than Python's int() takes by default (4,300).
    digits = _json_bytes(tg.text_update(35, "many digits", paid_star_count=7)).replace(
        b'"paid_star_count": 7', b'"paid_star_count": ' + b"9" * 5_000
    )
    wa_unread = wa.message_notification("15550031", text="unread numbers")
    value = wa_unread["entry"][0]["changes"][0]["value"]
    value["contacts"][0]["profile"]["rank"] = INF
    value["messages"][0]["errors"] = [{"code": HUGE, "ratio": NAN}]
    wa_untimed = wa.message_notification("15550032", text="no time")
    wa_untimed["entry"][0]["changes"][0]["value"]["messages"][0]["timestamp"] = NAN
    wa_batch = wa.message_notification("15550033", text="kept")
    [nan_id] = wa.message_notification("15550034", text="id is NaN")["entry"][0]["changes"]
    nan_id["value"]["messages"][0]["id"] = NAN
    wa_batch["entry"][0]["changes"][0]["value"]["messages"] += nan_id["value"]["messages"]
    forged = _json_bytes(wa.message_notification("15550035", text="forged")).replace(
        b'"type": "text"', b'"type": "text", "n": NaN'
    )
    # Signed over the body as a re-serialiser would see it, not over the bytes sent.
    _, signed_otherwise = wa.signed(forged.replace(b"NaN", b"null"))
    async with platform_gateway(database_url, tmp_path, llm) as p:
        with structlog.testing.capture_logs() as logs:
            telegram = [
                await p.telegram(_json_bytes(unread)),
                await p.telegram(_json_bytes(photo)),
                await p.telegram(_json_bytes(undated)),
                await p.telegram(_json_bytes(edit)),
                await p.telegram(digits),
                await p.telegram(
                    _json_bytes(tg.text_update(36, "chat id", chat=tg.private_chat(HUGE)))
                ),
                await p.telegram(_json_bytes(tg.text_update(37, "message id", message_id=HUGE))),
                await p.telegram(_json_bytes(no_sender)),
                await p.telegram(b'{"update_id": NaN}'),
            ]
            whatsapp = [
                await p.whatsapp(_json_bytes(wa_unread)),
                await p.whatsapp(_json_bytes(wa_untimed)),
                await p.whatsapp(_json_bytes(wa_batch)),
            ]
        unsigned = await p.telegram(_json_bytes(unread), secret=None)
        refused = await p.gw.http.post(
            "/webhooks/whatsapp", content=forged, headers=signed_otherwise
        )
        messages = await p.all_messages()
        ours = await p.gw.http.post(
            f"/api/v1/sessions/{messages[0]['conversation_id']}/messages",
            content=b'{"text": "hi", "channel": NaN}',
            headers=ADMIN | {"Content-Type": "application/json"},
        )

    statuses = [r.status_code for r in telegram + whatsapp]
    assert statuses == [200] * 12, [r.text for r in telegram + whatsapp]
    assert (unsigned.status_code, refused.status_code) == (401, 403)
    assert 400 <= ours.status_code < 500
    incoming = sorted(
        # The last line: a photo's caption follows its placeholder.
        (m["channel"], m["role"], m["text"].rsplit("\n", 1)[-1])
        for m in messages
        if m["role"] != "assistant"
    )
    assert incoming == [
        ("telegram", "event", "edited text"),
        ("telegram", "user", "a caption"),
        ("telegram", "user", "many digits"),
        ("telegram", "user", "no date"),
        ("telegram", "user", "unread numbers"),
        ("whatsapp", "user", "kept"),
        ("whatsapp", "user", "no time"),
        ("whatsapp", "user", "unread numbers"),
    ]
    ignored = [
        line for line in logs if line["log_level"] == "warning" and "ignored" in line["event"]
    ]
    assert len(ignored) == 4, [line["event"] for line in logs]


async def test_malformed_signed_webhooks_get_400_and_store_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    no_chat = tg.text_update(5, "hi")
    del no_chat["message"]["chat"]
    wrong_types = tg.text_update(5, "hi")
    wrong_types["message"]["text"] = 5
    bool_id = tg.text_update(5, "hi")
    bool_id["message"]["from"]["id"] = False
    async with platform_gateway(database_url, tmp_path, llm) as p:
        telegram = [
            await p.telegram(b"[" * 200_000),
            await p.telegram(b'{"update_id": 1, "message": ' + b"[" * 100 + b"]" * 100 + b"}"),
            await p.telegram(no_chat),
            await p.telegram(wrong_types),
            await p.telegram(bool_id),
        ]
        whatsapp = [
            await p.whatsapp(b"[" * 200_000),
            await p.whatsapp(b'{"object": ' + b"[" * 100 + b"]" * 100 + b"}"),
        ]
        assert await p.sessions() == []

    assert [r.status_code for r in telegram + whatsapp] == [400] * 7, [
        r.text for r in telegram + whatsapp
    ]


async def test_limits_answer_429_with_retry_after(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(
        database_url,
        tmp_path,
        llm,
        webchat_sessions_per_minute=2,
        webchat_messages_per_minute=2,
        webchat_sockets_per_visitor=1,
    )
    async with running_gateway(settings) as gw:
        sessions = [await gw.http.post("/webchat/sessions") for _ in range(3)]
        token = sessions[0].json()["token"]
        sends = [await gw.send(token, f"message {i}") for i in range(3)]
        async with gw.socket(token) as first:
            # Answered, so this socket holds its slot before the second one asks.
            await first.send(json.dumps({"type": "message", "text": "over", "client_id": "c"}))
            over = await next_frame(first, "error")
            async with gw.socket(token, ready=False) as second:
                refused_socket = await next_frame(second)
                await second.wait_closed()
                closed = second.close_code
        stored = await _texts(gw, token)

    assert [s.status_code for s in sessions] == [201, 201, 429]
    assert int(sessions[2].headers["Retry-After"]) >= 1
    assert [s.status_code for s in sends] == [200, 200, 429]
    assert int(sends[2].headers["Retry-After"]) >= 1
    assert over["code"] == "rate_limited"
    assert over["retry_after"] >= 1
    assert refused_socket["code"] == "rate_limited"
    assert closed == 4429
    assert stored == ["message 0", "reply 1", "message 1", "reply 2"]


async def test_a_message_sent_again_is_no_new_message_for_the_rate_limit(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    """A client resends what it wrote after a reconnect; refusing the copy as over the
    limit would give it back to be sent (and stored) a second time."""
    settings = make_settings(database_url, tmp_path, llm, webchat_messages_per_minute=1)
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        first = await gw.send(token, "once", client_id="c1")
        again = await gw.send(token, "once", client_id="c1")
        async with gw.socket(token) as ws:
            await ws.send(json.dumps({"type": "message", "text": "once", "client_id": "c1"}))
            resent = await next_frame(ws, "ack")
            await ws.send(json.dumps({"type": "message", "text": "new", "client_id": "c2"}))
            over = await next_frame(ws, "error")
        stored = await _texts(gw, token)

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert resent["seq"] == first.json()["message"]["seq"]
    assert over["code"] == "rate_limited"
    assert stored == ["once", "reply 1"]


async def test_slow_or_half_sent_requests_are_closed(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm, read_timeout_seconds=0.5)
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        async with gw.socket(token) as websocket:
            headers_cut = await _raw(gw.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            body_cut = await _raw(
                gw.url,
                b"POST /webchat/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab",
            )
            await _still_usable(websocket)

    assert headers_cut == b""
    assert body_cut.startswith(b"HTTP/1.1 408")


async def _raw(url: str, request: bytes) -> bytes:
    """Send `request` and read until the server closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()


async def test_a_request_that_never_ends_does_not_keep_the_server_from_stopping(
    tmp_path: Path,
) -> None:
    """The server stops within its shutdown budget even when a handler hangs on (without
    the bound, uvicorn waits for it forever and `serve` reports it stuck)."""
    app = FastAPI()
    entered, cancelled = asyncio.Event(), asyncio.Event()

    @app.get("/forever")
    async def forever() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    settings = make_settings("sqlite+aiosqlite:///unused.db", tmp_path, None, shutdown_seconds=0.5)
    async with serve(app, settings=settings) as url:
        host, port = url.removeprefix("http://").split(":")
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /forever HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(entered.wait(), timeout=10)

    assert cancelled.is_set()
    writer.close()
