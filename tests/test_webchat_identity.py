"""A site's identified user: one conversation on every device, under the name the site
gives, refused tokens said plainly, sessions (open sockets too) that end with the site's
token; CORS and the socket for the allowed origins only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus

from memory.archive.transcript import render_transcript
from memory.storage.models import Role
from tests.fakes.llm_server import FakeLLM
from tests.support.clock import ManualClock
from tests.support.harness import (
    ADMIN_TOKEN,
    Gateway,
    make_settings,
    next_frame,
    running_gateway,
)

SECRET = "site-identity-secret-0123456789abcdef"
SHOP = "https://shop.example"
START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _token(clock: ManualClock, secret: str = SECRET, **claims: Any) -> str:
    values: dict[str, Any] = {
        "sub": "user-42",
        "name": "Ada",
        "exp": int((clock.now() + timedelta(hours=1)).timestamp()),
    }
    return jwt.encode(values | claims, secret, algorithm="HS256")


async def _identify(gw: Gateway, token: str) -> tuple[int, dict[str, Any]]:
    response = await gw.http.post("/webchat/identify", json={"identity_token": token})
    return response.status_code, response.json()


async def _signed_in(gw: Gateway, token: str) -> str:
    """The web chat token a site's identity token is exchanged for."""
    status, body = await _identify(gw, token)
    assert status == 200, body
    web_token: str = body["token"]
    return web_token


async def _close_code(ws: ClientConnection) -> int | None:
    """The code the server closes the socket with, once every frame before it is read."""
    try:
        while True:
            await ws.recv()
    except ConnectionClosed as closed:
        return None if closed.rcvd is None else closed.rcvd.code


@contextlib.asynccontextmanager
async def _site_gateway(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> AsyncIterator[tuple[Gateway, ManualClock]]:
    """A gateway that takes the site's identity tokens, on a clock the test moves."""
    clock = ManualClock(START)
    settings = make_settings(database_url, tmp_path, llm, webchat_identity_secret=SECRET)
    async with running_gateway(settings, clock=clock) as gw:
        yield gw, clock


async def _admin(gw: Gateway, path: str) -> Any:
    response = await gw.http.get(path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 200, response.text
    return response.json()


async def test_one_person_on_every_device_and_nobody_else(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with _site_gateway(database_url, tmp_path, llm) as (gw, clock):
        _, phone = await _identify(gw, _token(clock))
        _, laptop = await _identify(gw, _token(clock))
        _, stranger = await _identify(gw, _token(clock, sub="user-43"))
        await gw.send(phone["token"], "written on the phone")
        on_laptop = await gw.history(laptop["token"])
        for_stranger = await gw.history(stranger["token"])
        people = (
            await gw.http.get("/api/v1/users", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        ).json()["items"]
        clock.advance(timedelta(hours=2))
        expired = await gw.http.get(
            "/webchat/messages", headers={"Authorization": f"Bearer {laptop['token']}"}
        )

    assert phone["conversation_id"] == laptop["conversation_id"]
    assert stranger["conversation_id"] != phone["conversation_id"]
    assert phone["token"].startswith("wc2.")
    assert [m["text"] for m in on_laptop][:1] == ["written on the phone"]
    assert for_stranger == []
    assert sorted(i["external_id"] for p in people for i in p["identities"]) == [
        "site:user-42",
        "site:user-43",
    ]
    assert {p["display_name"] for p in people} == {"Ada"}
    assert expired.status_code == 401
    assert "expired" in expired.json()["detail"]


async def test_refused_identity_tokens_say_why(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    clock = ManualClock(START)
    settings = make_settings(database_url, tmp_path, llm, webchat_identity_secret=SECRET)
    past = int((START - timedelta(minutes=5)).timestamp())
    too_long = int((START + timedelta(hours=25)).timestamp())
    unsigned = jwt.encode({"sub": "x", "exp": too_long}, key="", algorithm="none")
    async with running_gateway(settings, clock=clock) as gw:
        answers = {
            "expired": await _identify(gw, _token(clock, exp=past)),
            "other secret": await _identify(
                gw, _token(clock, secret="another-secret-0123456789abcdefghij")
            ),
            "too long": await _identify(gw, _token(clock, exp=too_long)),
            "alg none": await _identify(gw, unsigned),
            "odd sub": await _identify(gw, _token(clock, sub="a:b")),
            "no sub": await _identify(gw, _token(clock, sub=None)),
            "garbage": await _identify(gw, "not a token"),
        }
    off = make_settings(database_url, tmp_path / "off", llm)
    async with running_gateway(off, clock=clock) as gw:
        unset = await _identify(gw, _token(clock))

    assert {name: status for name, (status, _) in answers.items()} == dict.fromkeys(answers, 401)
    assert "expired" in answers["expired"][1]["detail"]
    assert "24 hours" in answers["too long"][1]["detail"]
    assert "sub" in answers["odd sub"][1]["detail"]
    assert unset[0] == 401
    assert "PARLEY_WEBCHAT_IDENTITY_SECRET" in unset[1]["detail"]


async def test_allowed_origins_may_call_the_web_chat_api_and_nothing_else(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm, webchat_allowed_origins=SHOP)
    preflight = {"Access-Control-Request-Method": "POST"}
    async with running_gateway(settings) as gw:
        allowed = await gw.http.options("/webchat/messages", headers=preflight | {"Origin": SHOP})
        other = await gw.http.options(
            "/webchat/messages", headers=preflight | {"Origin": "https://evil.example"}
        )
        created = await gw.http.post("/webchat/sessions", headers={"Origin": SHOP})
        operator = await gw.http.get(
            "/api/v1/sessions",
            headers={"Origin": SHOP, "Authorization": f"Bearer {ADMIN_TOKEN}"},
        )

    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == SHOP
    assert "access-control-allow-origin" not in other.headers
    assert created.headers["access-control-allow-origin"] == SHOP
    assert "access-control-allow-origin" not in operator.headers


async def test_an_open_socket_is_closed_when_the_sign_in_expires(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm, webchat_identity_secret=SECRET)
    async with running_gateway(settings) as gw:
        # In 7 to 8 s: time to start a socket and get a reply on a busy machine (with
        # 3 s, one CI run under xdist got the token refused before the socket was ready).
        expires = int(time.time()) + 8
        claims = {"sub": "user-42", "exp": expires}
        token = await _signed_in(gw, jwt.encode(claims, SECRET, algorithm="HS256"))
        async with gw.socket(token) as ws:
            await ws.send(json.dumps({"type": "message", "text": "in time", "client_id": "a"}))
            ack = await next_frame(ws, "ack")
            # Its reply and then, once the token has run out, the end: awaited, never slept.
            async with asyncio.timeout(20):
                expired = await next_frame(ws, "error")
                code = await _close_code(ws)
        ended_at = time.time()
        http = await gw.http.get("/webchat/messages", headers={"Authorization": f"Bearer {token}"})

    assert ack["seq"] == 1
    assert expired["code"] == "expired"
    assert "identify again" in expired["detail"]
    assert code == 4401
    assert ended_at >= expires  # not before its time
    assert http.status_code == 401


async def test_a_message_that_comes_after_the_sign_in_expired_is_not_stored(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with _site_gateway(database_url, tmp_path, llm) as (gw, clock):
        status, signed_in = await _identify(gw, _token(clock))
        assert status == 200, signed_in
        conversation = signed_in["conversation_id"]
        async with gw.socket(signed_in["token"]) as ws:
            await ws.send(json.dumps({"type": "message", "text": "in time", "client_id": "a"}))
            await next_frame(ws, "ack")
            await next_frame(ws, "message")
            await next_frame(ws, "message")  # its reply: nothing is running now
            clock.advance(timedelta(hours=2))  # past the token's `exp`
            await ws.send(json.dumps({"type": "message", "text": "too late", "client_id": "b"}))
            refused = await next_frame(ws)
            code = await asyncio.wait_for(_close_code(ws), 10)
        stored = await _admin(gw, f"/api/v1/sessions/{conversation}/messages")

    assert refused["type"] == "error"
    assert refused["code"] == "expired"
    assert code == 4401
    assert [m["text"] for m in stored["items"] if m["role"] == "user"] == ["in time"]


async def test_an_identified_person_goes_by_the_name_their_site_gives(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with _site_gateway(database_url, tmp_path, llm) as (gw, clock):
        first = await _signed_in(gw, _token(clock, name="Ada"))
        await gw.send(first, "as Ada")
        # A later token names her otherwise: the new name holds from then on, cleaned
        # of what could break a transcript's header line or could not be stored.
        renamed = await _signed_in(gw, _token(clock, name=" Ada\n\tLovelace\u202e\u0000 "))
        await gw.send(renamed, "as Ada Lovelace")
        unnamed = await _signed_in(gw, _token(clock, name=None))  # a name is kept
        async with gw.socket(unnamed) as ws:
            await ws.send(json.dumps({"type": "message", "text": "from a socket"}))
            await next_frame(ws, "ack")
        long = await _signed_in(gw, _token(clock, sub="user-43", name="\ud800" + "é" * 300))
        await gw.send(long, "a long name")
        people = {
            p["identities"][0]["external_id"]: p
            for p in (await _admin(gw, "/api/v1/users"))["items"]
        }
        ada = people["site:user-42"]
        [conversation] = ada["conversations"]
        session = await _admin(gw, f"/api/v1/sessions/{conversation}")
        stored = await gw.services.repos.messages.messages_after(uuid.UUID(conversation), 0, 100)
        typed = [m for m in stored if m.role is Role.USER]
        transcript = render_transcript(typed, "UTC")

    assert [m.author_name for m in typed] == ["Ada", "Ada Lovelace", "Ada Lovelace"]
    assert [line for line in transcript.splitlines() if line.startswith("[")] == [
        "[2026-06-01 12:00 · webchat · user Ada]",
        "[2026-06-01 12:00 · webchat · user Ada Lovelace]",
        "[2026-06-01 12:00 · webchat · user Ada Lovelace]",
    ]
    assert ada["display_name"] == "Ada Lovelace"
    assert [i["display_name"] for i in ada["identities"]] == ["Ada Lovelace"]
    assert session["title"] == "Ada Lovelace"
    assert people["site:user-43"]["display_name"] == "\ufffd" + "é" * 199


@pytest.mark.parametrize("allowed", [True, False], ids=["listed", "unset"])
async def test_the_socket_takes_pages_of_the_allowed_origins_and_clients_without_one(
    database_url: str, tmp_path: Path, llm: FakeLLM, allowed: bool
) -> None:
    extra = {"webchat_allowed_origins": SHOP} if allowed else {}
    settings = make_settings(database_url, tmp_path, llm, **extra)
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        with pytest.raises(InvalidStatus) as foreign:
            async with gw.socket(token, origin="https://evil.example"):
                pass
        taken = []
        # The gateway's own pages, an app or a script (no Origin), and the listed site.
        origins = [gw.url, None] + ([SHOP] if allowed else [])
        for origin in origins:
            async with gw.socket(token, origin=origin, ready=False) as ws:
                taken.append((await next_frame(ws))["type"])
        if not allowed:
            with pytest.raises(InvalidStatus) as unlisted:
                async with gw.socket(token, origin=SHOP):
                    pass
            assert unlisted.value.response.status_code == 403

    assert foreign.value.response.status_code == 403
    assert taken == ["ready"] * len(origins)
