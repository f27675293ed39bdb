"""The turn pipeline end to end: web chat API → core → storage → fake model → reply."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.fakes.llm_server import Fail, FakeLLM, Hang, Reply
from tests.support.clock import ManualClock
from tests.support.harness import Gateway, running_gateway, make_settings
from tests.support.polling import eventually


def _system(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    content: str = first["content"]
    return content


def _user_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def test_message_gets_a_stored_reply(database_url: str, tmp_path: Path, llm: FakeLLM) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, conversation_id = await gw.visitor()
        response = await gw.send(token, "hello there")

        assert response.status_code == 200, response.text
        body = response.json()
        assert body["message"] | {"created_at": None} == {
            "seq": 1, "role": "user", "text": "hello there", "channel": "webchat", "created_at": None
        }
        assert body["reply"]["seq"] == 2
        assert body["reply"]["role"] == "assistant"
        assert body["reply"]["text"] == "reply 1"
        assert datetime.fromisoformat(body["reply"]["created_at"]).utcoffset() == timedelta(0)
        assert [m["seq"] for m in await gw.history(token)] == [1, 2]
        assert "hello there" in _user_texts(llm.requests[0])[-1]
        assert llm.headers[0]["authorization"] == "Bearer sk-test-key-that-must-not-leak"


async def test_repeated_client_id_stores_once_and_answers_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        first = await gw.send(token, "only once", client_id="c-1")
        second = await gw.send(token, "only once", client_id="c-1")

        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()
        assert len(llm.requests) == 1
        assert [m["role"] for m in await gw.history(token)] == ["user", "assistant"]


async def test_client_ids_are_scoped_to_their_visitor(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        alice, _ = await gw.visitor()
        bob, _ = await gw.visitor()
        a = await gw.send(alice, "from alice", client_id="1")
        b = await gw.send(bob, "from bob", client_id="1")

        assert a.json()["message"]["text"] == "from alice"
        assert b.json()["message"]["text"] == "from bob"
        assert len(llm.requests) == 2
