"""The dashboard's session cookie over HTTP, route by route: no change without the
session's CSRF token or from another origin, no answer to a forged or ended session,
and a session that ends at sign-out, after 12 hours and when PARLEY_ADMIN_TOKEN changes,
with only a hash of its cookie in the database."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from sqlalchemy import func, select
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from gateway.http.operators import COOKIE, SESSION_TTL
from memory.storage.engine import create_engine
from memory.storage.models import Message, OperatorSession
from tests.fakes.llm_server import FakeLLM
from tests.support.clock import ManualClock
from tests.support.harness import ADMIN_TOKEN, Gateway, make_settings, running_gateway
from tests.support.operators import Signed, sign_in
from tests.support.world import dump

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
FOREIGN = "https://evil.example"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# What may change while refused requests come in: the sign-in's own row, and the
# leases the gateway's own sweeps take on their schedule.
BOOKKEEPING = frozenset({"operator_sessions", "leases"})


async def _things(gw: Gateway) -> dict[str, str]:
    """Real ids for every path parameter, so a request that got through would act."""
    token, session = await gw.visitor()
    await gw.send(token, "hello from a visitor")
    detail = (await gw.http.get(f"/api/v1/sessions/{session}", headers=ADMIN)).json()
    history = (await gw.http.get(f"/api/v1/sessions/{session}/messages", headers=ADMIN)).json()
    reminder = await gw.http.post(
        f"/api/v1/users/{detail['user_id']}/reminders",
        json={"when": "P1D", "text": "a reminder"},
        headers=ADMIN,
    )
    return {
        "session_id": session,
        "user_id": detail["user_id"],
        "identity_id": detail["identities"][0]["id"],
        "message_id": str(history["items"][0]["id"]),
        "chunk_id": "1",
        "code": "ABCD",
        "job_id": "summarize:1",
        "reminder_id": str(reminder.json()["id"]),
        "attachment_id": "1",
    }


async def _operations(gw: Gateway, things: dict[str, str]) -> list[tuple[str, str]]:
    """Every /api/v1 operation of the OpenAPI document, with `things` in its path."""
    document = (await gw.http.get("/openapi.json")).json()
    return [
        (method.upper(), re.sub(r"\{(\w+)\}", lambda m: things[m.group(1)], path))
        for path, item in document["paths"].items()
        if path.startswith("/api/v1")
        for method in item
    ]


def _unsafe(operations: list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    yield from ((method, path) for method, path in operations if method in UNSAFE)
    yield "DELETE", "/admin/session"  # signing out is a change too


async def _socket(gw: Gateway, session: str, headers: dict[str, str]) -> tuple[Any, ...]:
    """The live socket's first frame, and its close code (None: it is open, ready)."""
    url = gw.url.replace("http", "ws", 1) + f"/admin/live?session={session}"
    origin = headers.pop("Origin", None)
    async with connect(url, origin=cast(Origin | None, origin), additional_headers=headers) as ws:
        first = json.loads(await ws.recv())
        if first["type"] == "ready":
            return first, None
        with contextlib.suppress(ConnectionClosed):
            await ws.recv()
        return first, ws.close_code


def _without(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {name: rows for name, rows in tables.items() if name not in BOOKKEEPING}


async def test_a_change_needs_the_sessions_csrf_token_and_the_dashboards_own_origin(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        things = await _things(gw)
        operations = await _operations(gw, things)
        signed = await sign_in(gw)
        engine = create_engine(database_url)
        try:
            before = await dump(engine)
            refused: dict[tuple[str, str, str], int] = {}
            for method, path in _unsafe(operations):
                for name, headers in {
                    "no token": signed.headers(csrf=None),
                    "wrong token": signed.headers(csrf="0" * 64),
                    "foreign origin": signed.headers(origin=FOREIGN),
                    "own origin, no token": signed.headers(csrf=None, origin=gw.url),
                }.items():
                    response = await gw.http.request(method, path, headers=headers, json={})
                    refused[(method, path, name)] = response.status_code
            after = await dump(engine)
        finally:
            await engine.dispose()
        # The same cookie with its token, from the page's own origin, does change things;
        # reading needs no token.
        read = await gw.http.get("/api/v1/users", headers=signed.headers(csrf=None))
        renamed = await gw.http.patch(
            f"/api/v1/sessions/{things['session_id']}",
            json={"title": "renamed by the dashboard"},
            headers=signed.headers(origin=gw.url),
        )
        session = things["session_id"]
        foreign_socket = await _socket(gw, session, signed.headers(origin=FOREIGN))
        own_socket = await _socket(gw, session, signed.headers(origin=gw.url))
        no_origin_socket = await _socket(gw, session, signed.headers())

    assert len(refused) >= 4 * 12
    assert {key: status for key, status in refused.items() if status != 403} == {}
    assert _without(after) == _without(before)  # nothing a refused change could touch moved
    assert read.status_code == 200
    assert renamed.status_code == 200, renamed.text
    assert foreign_socket[1] == 4403
    assert "own page" in foreign_socket[0]["detail"]
    assert no_origin_socket[1] == 4403  # a socket always has an Origin in a browser
    assert own_socket == ({"type": "ready"}, None)


async def test_a_forged_or_expired_session_cookie_is_answered_401_everywhere(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    clock = ManualClock(datetime.now(UTC))
    async with running_gateway(make_settings(database_url, tmp_path, llm), clock=clock) as gw:
        things = await _things(gw)
        operations = await _operations(gw, things)
        forged = Signed(secrets.token_urlsafe(32), "0" * 64)
        expired = await sign_in(gw)
        clock.advance(SESSION_TTL + timedelta(seconds=1))
        answers: dict[tuple[str, str, str], int] = {}
        for name, signed in {"forged": forged, "expired": expired}.items():
            for method, path in [*operations, ("DELETE", "/admin/session")]:
                response = await gw.http.request(
                    method, path, headers=signed.headers(origin=gw.url), json={}
                )
                answers[(method, path, name)] = response.status_code
        page = await gw.http.get("/admin", headers=expired.headers())
        socket = await _socket(gw, things["session_id"], expired.headers(origin=gw.url))
        messages = await _count(database_url, Message)

    assert len(answers) >= 2 * 30
    assert {key: status for key, status in answers.items() if status != 401} == {}
    assert page.status_code == 303
    assert page.headers["location"] == "/admin/signin"
    assert socket[1] == 4401
    assert messages == 2  # the visitor's message and its reply, nothing else


async def test_a_session_ends_at_sign_out_at_expiry_and_when_the_admin_token_changes(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    clock = ManualClock(datetime.now(UTC))
    settings = make_settings(database_url, tmp_path, llm)
    async with running_gateway(settings, clock=clock) as gw:
        signed_in = await gw.http.post("/admin/session", json={"token": ADMIN_TOKEN})
        gw.http.cookies.clear()
        leaving = await sign_in(gw)
        stored = await _stored_sessions(database_url)
        out = await gw.http.delete("/admin/session", headers=leaving.headers(origin=gw.url))
        after_out = await gw.http.get("/api/v1/users", headers=leaving.headers())
        rows_after_out = await _count(database_url, OperatorSession)

        ageing = await sign_in(gw)
        clock.advance(SESSION_TTL - timedelta(minutes=1))
        nearly = await gw.http.get("/api/v1/users", headers=ageing.headers())
        clock.advance(timedelta(minutes=1))
        at_twelve_hours = await gw.http.get("/api/v1/users", headers=ageing.headers())

        kept = await sign_in(gw)
    async with running_gateway(settings, clock=clock) as gw:
        same_token = await gw.http.get("/api/v1/users", headers=kept.headers())
    other = make_settings(database_url, tmp_path, llm, admin_token="another-admin-token-987654")
    async with running_gateway(other, clock=clock) as gw:
        other_token = await gw.http.get("/api/v1/users", headers=kept.headers())
        other_page = await gw.http.get("/admin", headers=kept.headers())

    cookie = signed_in.headers["set-cookie"]
    assert f"Max-Age={int(SESSION_TTL.total_seconds())}" in cookie
    assert {"HttpOnly", "Secure", "SameSite=strict"} <= {p.strip() for p in cookie.split(";")}
    # Only a hash of each cookie is kept: its value is in no column of the table.
    assert len(stored) == 2
    cookies = [signed_in.cookies[COOKIE], leaving.cookie]
    assert not any(c in str(value) for c in cookies for row in stored for value in row.values())
    assert out.status_code == 204
    assert f"{COOKIE}=" in out.headers["set-cookie"]  # the browser is told to drop it
    assert after_out.status_code == 401
    assert rows_after_out == 1  # the other browser's session is still there
    assert nearly.status_code == 200
    assert at_twelve_hours.status_code == 401
    assert same_token.status_code == 200  # a restart alone signs nobody out
    assert other_token.status_code == 401
    assert other_page.status_code == 303


async def _stored_sessions(database_url: str) -> list[dict[str, Any]]:
    engine = create_engine(database_url)
    try:
        return (await dump(engine))["operator_sessions"]
    finally:
        await engine.dispose()


async def _count(database_url: str, table: Any) -> int:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            return int(await connection.scalar(select(func.count()).select_from(table)) or 0)
    finally:
        await engine.dispose()
