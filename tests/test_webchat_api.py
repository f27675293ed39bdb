"""Web chat API contract: bad input is refused clearly and stores nothing; the socket
streams, acknowledges and resumes."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.http.server import server_config
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.harness import ADMIN_TOKEN, make_settings, next_frame, running_gateway


@pytest.mark.parametrize(
    ("body", "headers", "status", "detail"),
    [
        pytest.param(b'{"text": "hi"', {}, 422, "JSON", id="malformed-json"),
        pytest.param(b'["text"]', {}, 422, "", id="not-an-object"),
        pytest.param(b'{"text": ""}', {}, 422, "", id="empty-text"),
        pytest.param(b'{"text": "   "}', {}, 422, "empty", id="blank-text"),
        pytest.param(b'{"text": "x" ,"extra": 1}', {}, 422, "", id="unknown-field"),
        pytest.param(b'{"text": "hi", "client_id": "a b"}', {}, 422, "", id="bad-client-id"),
        pytest.param(b'{"text": "' + b"x" * 5000 + b'"}', {}, 413, "larger than", id="oversized"),
        pytest.param(b'{"text": "' + b"y" * 1500 + b'"}', {}, 422, "longer than", id="too-long"),
        pytest.param(
            b'{"text": "hi"}', {"Authorization": "Bearer nope"}, 401, "token", id="bad-token"
        ),
        pytest.param(
            b'{"text": "hi"}', {"Authorization": "wc1.a.b"}, 401, "Bearer", id="no-scheme"
        ),
        pytest.param(
            b'{"text": "hi"}',
            {"Authorization": "Bearer wc1.abc.forged"},
            401,
            "invalid",
            id="forged",
        ),
    ],
)
async def test_bad_requests_get_a_clear_4xx_and_store_nothing(
    database_url: str,
    tmp_path: Path,
    llm: FakeLLM,
    body: bytes,
    headers: dict[str, str],
    status: int,
    detail: str,
) -> None:
    settings = make_settings(
        database_url, tmp_path, llm, max_body_bytes=4096, max_message_chars=1000
    )
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        response = await gw.http.post(
            "/webchat/messages",
            content=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            | headers,
        )
        assert response.status_code == status, response.text
        assert detail in response.text
        assert await gw.history(token) == []
    assert llm.requests == []


async def test_chunked_oversized_body_is_refused(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async def chunks() -> object:
        for _ in range(10):
            yield b"x" * 1024

    settings = make_settings(database_url, tmp_path, llm, max_body_bytes=4096)
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        response = await gw.http.post(
            "/webchat/messages",
            content=chunks(),  # type: ignore[arg-type]
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert response.status_code == 413
        assert await gw.history(token) == []


async def test_history_pages_by_seq_either_way(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        for text in ("one", "two", "three"):
            await gw.send(token, text)
        auth = {"Authorization": f"Bearer {token}"}

        async def get(**params: int) -> httpx.Response:
            return await gw.http.get("/webchat/messages", params=params, headers=auth)

        async def seqs(**params: int) -> list[int]:
            response = await get(**params)
            assert response.status_code == 200, response.text
            return [m["seq"] for m in response.json()["messages"]]

        assert await seqs(after_seq=1, limit=2) == [2, 3]
        assert await seqs(before_seq=5, limit=2) == [3, 4]  # the newest before 5, oldest first
        assert await seqs(before_seq=3, limit=10) == [1, 2]
        assert await seqs(before_seq=1) == []
        both = await get(after_seq=1, before_seq=4)
        assert both.status_code == 422
        assert both.json()["detail"][0]["loc"] == ["query", "before_seq"]
        assert "not both" in both.text
        assert (await get(after_seq=-1)).status_code == 422
        assert (await get(before_seq=0)).status_code == 422


async def test_a_socket_asking_for_recent_history_gets_the_newest_and_every_unread_one(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        for n in range(6):
            await gw.send(token, f"message {n}")  # seqs 1 to 12, with the replies
        markers = itertools.count()

        async def resumed(frame: dict[str, int], *, seen: int | None = None) -> list[int]:
            """The seqs a socket sends for `frame`, up to the next live message."""
            async with gw.socket(token) as ws:
                if seen is not None:
                    await ws.send(json.dumps({"type": "seen", "seq": seen}))
                await ws.send(json.dumps({"type": "resume"} | frame))
                # A message of our own marks where the replay ended: it is the next seq.
                marker = f"marker {next(markers)}"
                await ws.send(json.dumps({"type": "message", "text": marker}))
                got: list[int] = []
                while True:
                    sent = await next_frame(ws, "message")
                    if sent["text"] == marker:
                        break
                    got.append(sent["seq"])
                await next_frame(ws, "message")  # its reply, so nothing is left running
            return got

        # Read up to 4: everything unread comes, though more than the 4 recent ones.
        unread = await resumed({"after_seq": 0, "recent": 4}, seen=4)
        # All read (the marker and its reply too): only the 4 newest.
        read = await resumed({"after_seq": 0, "recent": 4}, seen=14)
        # Never what the client already has.
        after = await resumed({"after_seq": 15, "recent": 4})
        # Without `recent`: everything after `after_seq`, as before.
        everything = await resumed({"after_seq": 0})

    assert unread == list(range(5, 13))
    assert read == [11, 12, 13, 14]
    assert after == [16]
    assert everything == list(range(1, 19))


async def test_socket_acks_streams_and_delivers_the_reply(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # Each piece long enough to be clearly an answer: a call that may turn to the tools
    # holds back a shorter start (tests/test_recall_turns.py).
    reply = " ".join(["streamed in pieces, each long enough to be streamed as it comes"] * 8)
    llm.script(Reply(reply, pieces=3))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        async with gw.socket(token, ready=False) as ws:
            ready = await next_frame(ws)
            await ws.send('{"type": "message", "text": "hi socket", "client_id": "k1"}')
            ack = await next_frame(ws, "ack")
            frames = [await next_frame(ws) for _ in range(6)]

    assert ready == {"type": "ready", "seen_seq": 0}
    assert ack == {"type": "ack", "client_id": "k1", "seq": 1}
    assert frames[0]["type"] == "message"
    assert frames[0]["seq"] == 1
    assert frames[0]["text"] == "hi socket"
    assert frames[1] == {"type": "typing"}  # the model is asked; nothing written yet
    deltas = [f["text"] for f in frames[2:5]]
    assert all(f["type"] == "delta" for f in frames[2:5])
    assert "".join(deltas) == reply
    assert frames[5] | {"created_at": ""} == {
        "type": "message",
        "seq": 2,
        "role": "assistant",
        "text": reply,
        "channel": "webchat",
        "created_at": "",
        "attachments": [],
    }


async def test_socket_resumes_after_a_reconnect_without_gaps(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        for text in ("one", "two", "three"):
            await gw.send(token, text)
        async with gw.socket(token) as ws:
            await ws.send('{"type": "resume", "after_seq": 2}')
            seqs = [(await next_frame(ws, "message"))["seq"] for _ in range(4)]
            # A message sent elsewhere while the socket is open arrives live, in order.
            await gw.send(token, "four")
            seqs += [(await next_frame(ws, "message"))["seq"] for _ in range(2)]

    assert seqs == [3, 4, 5, 6, 7, 8]


async def test_socket_rejects_bad_frames_and_keeps_going(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        async with gw.socket(token) as ws:
            for raw in ("not json", '{"type": "dance"}', '{"type": "message", "text": " "}'):
                await ws.send(raw)
                error = await next_frame(ws)
                assert error["type"] == "error", error
                assert error["detail"]
            await ws.send('{"type": "message", "text": "fine"}')
            assert (await next_frame(ws, "ack"))["seq"] == 1
        assert [m["text"] for m in await gw.history(token)][:1] == ["fine"]


async def test_socket_with_a_bad_token_is_closed(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm)
    async with running_gateway(settings) as gw, gw.socket("wc1.someone.forged", ready=False) as ws:
        error = await next_frame(ws)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
    assert error["code"] == "unauthorized"
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401


async def test_the_token_goes_in_the_first_frame_or_the_socket_is_closed(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        url = gw.url.replace("http", "ws", 1) + "/webchat/ws"
        async with connect(url) as ws:
            await ws.send(json.dumps({"type": "resume", "after_seq": 0}))
            refused = await next_frame(ws)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 5)
        # Older clients still put it in the URL.
        async with gw.socket(token, in_url=True, ready=False) as ws:
            ready = await next_frame(ws)

    assert refused["code"] == "unauthorized"
    assert '"auth"' in refused["detail"]
    assert token not in refused["detail"]
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401
    assert ready == {"type": "ready", "seen_seq": 0}


async def test_a_socket_is_not_compressed_even_when_the_client_offers_it(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # permessage-deflate keeps zlib state for each socket's life: most of what an idle
    # socket costs (bench.idle_sockets). Browsers, like this client, offer it.
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        async with gw.socket(token) as ws:
            offered = ws.request.headers.get("Sec-WebSocket-Extensions") if ws.request else None
            agreed = ws.response.headers.get("Sec-WebSocket-Extensions") if ws.response else None
            await ws.send(json.dumps({"type": "message", "text": "hi", "client_id": "c1"}))
            ack = await next_frame(ws, "ack")

    assert offered is not None
    assert "permessage-deflate" in offered
    assert agreed is None
    assert ack["client_id"] == "c1"


def test_sockets_are_pinged_as_often_as_the_setting_says(tmp_path: Path) -> None:
    # Each ping costs CPU for every socket held (bench.idle_sockets); a proxy's idle
    # timeout bounds it from above.
    settings = make_settings("sqlite+aiosqlite://", tmp_path, None, websocket_ping_seconds=45)
    default = make_settings("sqlite+aiosqlite://", tmp_path, None)

    assert server_config(object(), settings, host="127.0.0.1", port=1).ws_ping_interval == 45
    assert server_config(object(), default, host="127.0.0.1", port=1).ws_ping_interval == 30


async def test_how_far_a_person_has_read_is_kept_for_their_next_socket(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        other, _ = await gw.visitor()
        await gw.send(token, "one")
        async with gw.socket(token, ready=False) as ws:
            first = await next_frame(ws, "ready")
            await ws.send('{"type": "seen", "seq": 2}')
            # A device that read less does not move it back.
            await ws.send('{"type": "seen", "seq": 1}')
            await ws.send('{"type": "seen", "seq": -1}')
            invalid = await next_frame(ws, "error")
        async with gw.socket(token, ready=False) as ws:
            again = await next_frame(ws, "ready")
        async with gw.socket(other, ready=False) as ws:
            theirs = await next_frame(ws, "ready")

    assert first["seen_seq"] == 0
    assert invalid["code"] == "bad_frame"
    assert again["seen_seq"] == 2
    assert theirs["seen_seq"] == 0


async def test_tokens_survive_a_restart_and_only_open_their_own_conversation(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm)
    async with running_gateway(settings) as gw:
        alice, alice_conversation = await gw.visitor()
        bob, _ = await gw.visitor()
        await gw.send(alice, "alice's secret")
    async with running_gateway(settings) as gw:
        assert (await gw.history(alice))[0]["text"] == "alice's secret"
        assert await gw.history(bob) == []
        session = await gw.http.post("/webchat/sessions")
        assert session.json()["conversation_id"] != alice_conversation


async def test_an_erased_conversation_says_so_to_its_open_socket_and_waiting_request(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        asked = (await gw.send(token, "/erase")).json()["reply"]["text"]
        code = asked.split("/erase ")[1].split()[0]
        async with gw.socket(token) as ws:
            await ws.send('{"type": "resume", "after_seq": 0}')
            # The request that erases waits for its reply, which will never be stored.
            erased = await gw.send(token, f"/erase {code}")
            ended = await next_frame(ws, "ended")
            with pytest.raises(ConnectionClosed) as closed:
                await next_frame(ws)
        afterwards = await gw.history(token)

    assert erased.status_code == 200, erased.text
    assert erased.json()["reply"] is None
    assert erased.json()["notice"].startswith("Done: everything I kept of you is erased")
    assert ended == {"type": "ended", "text": erased.json()["notice"]}
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4410
    assert afterwards == []  # the same token starts from nothing


async def test_a_conversation_an_operator_deletes_ends_for_its_open_socket(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, conversation = await gw.visitor()
        await gw.send(token, "hello")
        async with gw.socket(token) as ws:
            await ws.send('{"type": "resume", "after_seq": 2}')
            deleted = await gw.http.delete(
                f"/api/v1/sessions/{conversation}",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            )
            ended = await next_frame(ws, "ended")
        # The visitor stays: the next socket starts the conversation again from seq 1.
        async with gw.socket(token) as ws:
            await ws.send('{"type": "resume", "after_seq": 0}')
            await ws.send('{"type": "message", "text": "again"}')
            first = await next_frame(ws, "message")

    assert deleted.status_code == 200, deleted.text
    assert "deleted by the gateway's operator" in ended["text"]
    assert (first["seq"], first["text"]) == (1, "again")
