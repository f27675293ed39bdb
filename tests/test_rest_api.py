"""Operator REST API and probes."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.llm_server import FakeLLM
from tests.support.harness import ADMIN_TOKEN, make_settings, running_gateway

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def test_rest_api_is_off_without_an_admin_token(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm, admin_token=None)
    async with running_gateway(settings) as gw:
        response = await gw.http.get("/api/v1/sessions", headers=ADMIN)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert "PARLEY_ADMIN_TOKEN" in response.json()["error"]["message"]


async def test_rest_api_refuses_wrong_tokens(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": ADMIN_TOKEN}):
            response = await gw.http.get("/api/v1/sessions", headers=headers)
            assert response.status_code == 401, headers
            assert ADMIN_TOKEN not in response.text


async def test_sessions_and_their_messages(database_url: str, tmp_path: Path, llm: FakeLLM) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, conversation_id = await gw.visitor()
        await gw.send(token, "for the operator")
        await gw.visitor()  # a second, empty session

        listing = (await gw.http.get("/api/v1/sessions", headers=ADMIN)).json()
        url = f"/api/v1/sessions/{conversation_id}/messages"
        first = (await gw.http.get(url, params={"limit": 1}, headers=ADMIN)).json()
        rest = (
            await gw.http.get(url, params={"cursor": first["next_cursor"]}, headers=ADMIN)
        ).json()
        last = (await gw.http.get(url, params={"before_seq": 3, "limit": 1}, headers=ADMIN)).json()
        earlier = (
            await gw.http.get(url, params={"cursor": last["next_cursor"]}, headers=ADMIN)
        ).json()
        missing = await gw.http.get(
            "/api/v1/sessions/00000000-0000-0000-0000-000000000000/messages", headers=ADMIN
        )

    # Newest first: the empty session was made last.
    assert [s["message_count"] for s in listing["items"]] == [0, 2]
    assert listing["items"][1]["id"] == conversation_id
    assert listing["next_cursor"] is None
    assert [m["text"] for m in first["items"]] == ["for the operator"]
    assert [m["role"] for m in rest["items"]] == ["assistant"]
    assert rest["items"][0]["delivery"] == "sent"
    assert rest["next_cursor"] is None
    assert [m["seq"] for m in last["items"]] == [2]
    assert [m["seq"] for m in earlier["items"]] == [1]
    assert earlier["next_cursor"] is None
    assert missing.status_code == 404
    assert missing.json() == {"error": {"code": "not_found", "message": "no such session"}}


async def test_probes(database_url: str, tmp_path: Path, llm: FakeLLM) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        health = await gw.http.get("/healthz")
        ready = await gw.http.get("/readyz")
        docs = await gw.http.get("/openapi.json")
    assert health.json() == {"status": "ok"}
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready"}
    assert "/webchat/messages" in docs.json()["paths"]


async def test_readiness_follows_redis_when_it_is_configured(
    tmp_path: Path, redis_url: str
) -> None:
    sqlite = f"sqlite+aiosqlite:///{tmp_path / 'parley.db'}"
    up = make_settings(sqlite, tmp_path / "up", None, redis_url=redis_url)
    down = make_settings(sqlite, tmp_path / "down", None, redis_url="redis://127.0.0.1:9/0")
    async with running_gateway(up) as gw:
        ready = await gw.http.get("/readyz")
    async with running_gateway(down) as gw:
        unready = await gw.http.get("/readyz")
        alive = await gw.http.get("/healthz")

    assert ready.status_code == 200
    assert unready.status_code == 503
    assert unready.json() == {"status": "unavailable", "detail": "job queue unreachable"}
    assert alive.status_code == 200
