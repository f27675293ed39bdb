"""Two replicas, one conversation: turns never overlap, and a dead replica's
conversation passes to the other.

Each replica is a whole gateway (its own app, turn runner and lease holder) on the
same Postgres database, as two `parley serve` behind a load balancer would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.typing import Origin

from gateway.inbox.core import REPLY_POLL_SECONDS
from tests.fakes.llm_server import FakeLLM, Hang, Reply
from tests.fakes.telegram_api import TgFail, fake_telegram, text_update
from tests.support.faults.processes import RedisServer, Stopwatch
from tests.support.harness import (
    ADMIN_TOKEN,
    Gateway,
    make_settings,
    next_frame,
    running_gateway,
)
from tests.support.operators import sign_in
from tests.support.platforms import platform_gateway
from tests.support.polling import eventually
from tests.support.process import REPO, free_port, parley_env, start_parley, stop_process
from tests.support.redis import fresh_redis

# Replicas share a database server; an embedded SQLite file is one process's alone.
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
CHAT = 4242
pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@contextlib.asynccontextmanager
async def replicas(
    database_url: str, tmp_path: Path, llm: FakeLLM, **extra: Any
) -> AsyncIterator[tuple[Gateway, Gateway]]:
    first = make_settings(database_url, tmp_path / "a", llm, **extra)
    second = make_settings(database_url, tmp_path / "b", llm, **extra)
    async with running_gateway(first) as a, running_gateway(second) as b:
        yield a, b


def _prompt_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["messages"])


async def test_messages_to_both_replicas_never_run_two_turns_at_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("first answer", gate=gate), Reply("second answer"))
    async with replicas(database_url, tmp_path, llm) as (a, b):
        token, _ = await a.visitor()
        first = asyncio.create_task(a.send(token, "one"))
        await llm.wait_for_requests(1)
        second = asyncio.create_task(b.send(token, "two"))
        # Replica b has stored "two" while a's turn is still writing.
        await eventually(lambda: a.history(token), until=lambda h: len(h) == 2)
        gate.set()
        answers = [(await first).json(), (await second).json()]
        history = await a.history(token)

    assert llm.max_active == 1
    assert len(llm.requests) == 2
    assert "two" in _prompt_text(llm.requests[1])
    assert [answer["reply"]["text"] for answer in answers] == ["first answer", "second answer"]
    assert [(m["seq"], m["role"], m["text"]) for m in history] == [
        (1, "user", "one"),
        (2, "user", "two"),
        (3, "assistant", "first answer"),
        (4, "assistant", "second answer"),
    ]


async def test_a_burst_across_replicas_is_answered_by_one_following_turn(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("to the first", gate=gate), Reply("to the burst"))
    async with replicas(database_url, tmp_path, llm) as (a, b):
        token, _ = await a.visitor()
        first = asyncio.create_task(a.send(token, "start"))
        await llm.wait_for_requests(1)
        burst = [
            asyncio.create_task(gateway.send(token, text))
            for gateway, text in ((b, "burst 1"), (a, "burst 2"), (b, "burst 3"))
        ]
        await eventually(lambda: a.history(token), until=lambda h: len(h) == 4)
        gate.set()
        await first
        replies = [(await task).json()["reply"]["text"] for task in burst]

    assert len(llm.requests) == 2
    assert all(f"burst {n}" in _prompt_text(llm.requests[1]) for n in (1, 2, 3))
    assert replies == ["to the burst"] * 3


@pytest.mark.parametrize("link", ["redis", "none"])
async def test_a_post_on_one_replica_gets_the_reply_written_on_the_other(
    database_url: str, tmp_path: Path, llm: FakeLLM, link: str
) -> None:
    # With Redis the reply's event wakes the waiting request; without, it looks in the
    # database every REPLY_POLL_SECONDS.
    extra = {"redis_url": await fresh_redis()} if link == "redis" else {}
    gate = asyncio.Event()
    llm.script(Reply("busy", gate=gate), Reply("for b's caller"))
    async with replicas(database_url, tmp_path, llm, **extra) as (a, b):
        if link == "redis":
            assert b.services.fanout is not None
            await asyncio.wait_for(b.services.fanout.listening.wait(), 10)
        token, conversation = await a.visitor()
        first = asyncio.create_task(a.send(token, "keeps a busy"))
        await llm.wait_for_requests(1)
        on_b = asyncio.create_task(b.send(token, "asked on b"))
        await eventually(lambda: b.history(token), until=lambda h: len(h) == 2)
        if link == "redis":
            await _heard_on(b, conversation)  # the waiting request listens
        gate.set()  # a's turn ends, and a answers b's caller's message too
        await first
        await eventually(lambda: a.history(token), until=lambda h: len(h) == 4)
        replied = asyncio.get_running_loop().time()
        answer = await on_b
        waited = asyncio.get_running_loop().time() - replied

    assert answer.status_code == 200
    assert answer.json()["reply"]["text"] == "for b's caller"
    assert waited < (1.0 if link == "redis" else REPLY_POLL_SECONDS + 1.0)


async def test_an_erasure_on_one_replica_ends_the_socket_open_on_the_other(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with replicas(database_url, tmp_path, llm, redis_url=await fresh_redis()) as (a, b):
        assert b.services.fanout is not None
        await asyncio.wait_for(b.services.fanout.listening.wait(), 10)
        token, conversation = await a.visitor()
        asked = (await a.send(token, "/erase")).json()["reply"]["text"]
        code = asked.split("/erase ")[1].split()[0]
        async with b.socket(token) as ws:
            await ws.send('{"type": "resume", "after_seq": 0}')
            await _heard_on(b, conversation)
            erased = await a.send(token, f"/erase {code}")
            ended = await next_frame(ws, "ended")

    assert erased.json()["notice"] == ended["text"]


async def test_a_delivery_retried_on_one_replica_rings_the_dashboard_open_on_the_other(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Reply("a reply Telegram refuses first"))
    redis_url = await fresh_redis()
    async with (
        fake_telegram() as telegram,
        platform_gateway(database_url, tmp_path / "a", llm, tg=telegram, redis_url=redis_url) as a,
        platform_gateway(database_url, tmp_path / "b", llm, tg=telegram, redis_url=redis_url) as b,
    ):
        assert b.gw.services.fanout is not None
        await asyncio.wait_for(b.gw.services.fanout.listening.wait(), 10)
        telegram.fail("sendMessage", TgFail(403, "Forbidden: bot was blocked by the user"))
        await a.telegram(text_update(CHAT, "hello"))
        failed = await eventually(
            lambda: a.gw.http.get("/api/v1/deliveries", headers=ADMIN),
            until=lambda r: len(r.json()["items"]) == 1,
        )
        reply = failed.json()["items"][0]
        signed = await sign_in(b.gw)
        live = f"/admin/live?session={reply['conversation_id']}"
        url = b.gw.url.replace("http", "ws", 1) + live
        headers = signed.headers()
        # A ring that never comes fails here, not at the test's timeout.
        async with (
            asyncio.timeout(15),
            connect(url, origin=Origin(b.gw.url), additional_headers=headers) as ws,
        ):
            assert json.loads(await ws.recv()) == {"type": "ready"}
            # Again once b hears the conversation from a: what came meanwhile is read.
            assert json.loads(await ws.recv()) == {"type": "ready"}
            retried = await a.gw.http.post(f"/api/v1/deliveries/{reply['id']}/retry", headers=ADMIN)
            rings = [json.loads(await ws.recv()) for _ in range(2)]  # pending again, then sent

    assert reply["delivery_error"] == (
        "Telegram refused the message: Forbidden: bot was blocked by the user"
    )
    assert retried.status_code == 200, retried.text
    assert rings == [{"type": "delivery", "seq": reply["seq"]}] * 2
    assert telegram.texts(CHAT) == ["a reply Telegram refuses first"]  # taken this time


async def test_a_replica_killed_mid_turn_leaves_the_conversation_to_the_other(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Hang(), Reply("answered by the survivor"))
    fast = {"turn_lease_seconds": 3, "sweep_interval_seconds": 0.5}
    port = free_port()
    env = parley_env(
        database_url=database_url,
        data_dir=str(tmp_path / "killed"),
        port=str(port),
        **llm.settings(),
        **{key: str(value) for key, value in fast.items()},
    )
    doomed = await start_parley("serve", env=env, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            await eventually(lambda: _ready(client), until=bool, seconds=30)
            session = (await client.post("/webchat/sessions")).json()
            sent = asyncio.create_task(
                client.post(
                    "/webchat/messages",
                    json={"text": "are you there?"},
                    headers={"Authorization": f"Bearer {session['token']}"},
                )
            )
            await llm.wait_for_requests(1)  # the doomed replica's turn is writing
            doomed.send_signal(signal.SIGKILL)
            with contextlib.suppress(httpx.TransportError):
                await sent
        survivor = make_settings(database_url, tmp_path / "survivor", llm, **fast)
        async with running_gateway(survivor) as b:
            history = await eventually(
                lambda: b.history(session["token"]), until=lambda h: len(h) == 2, seconds=60
            )
    finally:
        await stop_process(doomed, signal.SIGKILL)

    assert [(m["role"], m["text"]) for m in history] == [
        ("user", "are you there?"),
        ("assistant", "answered by the survivor"),
    ]
    assert len(llm.requests) == 2


async def _ready(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/readyz")).status_code == 200
    except httpx.TransportError:
        return False


async def test_a_socket_on_one_replica_streams_a_turn_run_on_the_other(
    database_url: str, tmp_path: Path, llm: FakeLLM, redis_url: str
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("streamed across replicas", pieces=4, gate=gate))
    async with replicas(database_url, tmp_path, llm, redis_url=redis_url) as (a, b):
        for gateway in (a, b):
            assert gateway.services.fanout is not None
            await asyncio.wait_for(gateway.services.fanout.listening.wait(), 10)
        token, conversation = await a.visitor()
        async with b.socket(token) as websocket:
            await websocket.send(json.dumps({"type": "resume", "after_seq": 0}))
            await _heard_on(b, conversation)  # else the first deltas may go unheard
            sent = asyncio.create_task(a.send(token, "hello via a"))
            async with asyncio.timeout(30):
                first = await next_frame(websocket, "message")
                await llm.wait_for_requests(1)
                gate.set()
                frames: list[dict[str, Any]] = []
                while not frames or frames[-1]["type"] != "message":
                    frames.append(await next_frame(websocket))
        await sent

    assert (first["seq"], first["role"], first["text"]) == (1, "user", "hello via a")
    deltas = "".join(f["text"] for f in frames if f["type"] == "delta")
    assert deltas == "streamed across replicas"
    assert (frames[-1]["seq"], frames[-1]["text"]) == (2, "streamed across replicas")


async def test_a_socket_catches_up_on_what_a_redis_outage_dropped(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Reply("before the outage"), Reply("during the outage"))
    redis = RedisServer(tmp_path, Stopwatch())  # a private Redis, to stop and start again
    await redis.start()
    try:
        async with replicas(database_url, tmp_path, llm, redis_url=redis.url) as (a, b):
            fanout = b.services.fanout
            assert fanout is not None
            await asyncio.wait_for(fanout.listening.wait(), 10)
            token, _ = await a.visitor()
            async with b.socket(token) as websocket, asyncio.timeout(60):
                await websocket.send(json.dumps({"type": "resume", "after_seq": 0}))
                await a.send(token, "one")
                assert [(await next_frame(websocket, "message"))["seq"] for _ in "12"] == [1, 2]
                await redis.kill()
                await eventually(lambda: _is_set(fanout.listening), until=lambda s: not s)
                answer = await a.send(token, "two")  # its events to b are dropped
                assert answer.json()["reply"]["seq"] == 4
                await redis.start()
                caught_up = [await next_frame(websocket, "message") for _ in "34"]
    finally:
        await redis.kill()

    assert [(f["seq"], f["text"]) for f in caught_up] == [(3, "two"), (4, "during the outage")]


async def _is_set(event: asyncio.Event) -> bool:
    return event.is_set()


async def _heard_on(gateway: Gateway, conversation: str) -> None:
    """Until Redis has `gateway`'s subscription to the conversation (a subscriber there
    catches up from the database then, but deltas and rings are not stored)."""
    fanout = gateway.services.fanout
    assert fanout is not None
    conversation_id = uuid.UUID(conversation)

    async def hears() -> bool:
        return fanout.hears(conversation_id)

    await eventually(hears, until=bool)


async def test_two_replicas_on_redis_share_one_visitors_message_budget(
    database_url: str, tmp_path: Path, llm: FakeLLM, redis_url: str
) -> None:
    limits = {"redis_url": redis_url, "webchat_messages_per_minute": 3}
    async with replicas(database_url, tmp_path, llm, **limits) as (a, b):
        token, _ = await a.visitor()
        other, _ = await b.visitor()
        spent = [
            (await gateway.send(token, f"message {n}")).status_code
            for n, gateway in enumerate((a, b, a))
        ]
        over_b = await b.send(token, "one too many, on b")
        over_a = await a.send(token, "one too many, on a")
        someone_else = await b.send(other, "my own budget")

    assert spent == [200, 200, 200]
    assert over_b.status_code == 429
    assert over_a.status_code == 429
    assert int(over_b.headers["Retry-After"]) >= 1
    assert someone_else.status_code == 200
