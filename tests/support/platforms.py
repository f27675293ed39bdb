"""A real gateway wired to the fake Telegram and WhatsApp servers, with helpers to post
webhooks as the platforms do and to read what was stored through the REST API."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gateway.clock import Clock
from tests.fakes.graph_api import FakeGraph, fake_graph, signed, whatsapp_settings
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import (
    WEBHOOK_SECRET,
    FakeTelegram,
    fake_telegram,
    telegram_settings,
)
from tests.support.harness import ADMIN_TOKEN, Gateway, make_settings, running_gateway

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


@dataclass
class Platforms:
    gw: Gateway
    tg: FakeTelegram
    wa: FakeGraph

    async def telegram(
        self, update: dict[str, Any] | bytes, secret: str | None = WEBHOOK_SECRET
    ) -> httpx.Response:
        headers = {"Content-Type": "application/json"}
        if secret is not None:
            headers[SECRET_HEADER] = secret
        if isinstance(update, bytes):
            return await self.gw.http.post("/webhooks/telegram", content=update, headers=headers)
        return await self.gw.http.post("/webhooks/telegram", json=update, headers=headers)

    async def whatsapp(self, payload: dict[str, Any] | bytes) -> httpx.Response:
        body, headers = signed(payload)
        return await self.gw.http.post("/webhooks/whatsapp", content=body, headers=headers)

    async def sessions(self) -> list[dict[str, Any]]:
        response = await self.gw.http.get("/api/v1/sessions", headers=ADMIN)
        assert response.status_code == 200, response.text
        sessions: list[dict[str, Any]] = response.json()["items"]
        return sessions

    async def messages(self, session_id: str) -> list[dict[str, Any]]:
        response = await self.gw.http.get(
            f"/api/v1/sessions/{session_id}/messages", params={"limit": 1000}, headers=ADMIN
        )
        assert response.status_code == 200, response.text
        messages: list[dict[str, Any]] = response.json()["items"]
        return messages

    async def all_messages(self) -> list[dict[str, Any]]:
        found = []
        for session in await self.sessions():
            found.extend(await self.messages(session["id"]))
        return found


@contextlib.asynccontextmanager
async def platform_gateway(
    database_url: str,
    tmp_path: Path,
    llm: FakeLLM,
    *,
    clock: Clock | None = None,
    tg: FakeTelegram | None = None,
    wa: FakeGraph | None = None,
    **extra: Any,
) -> AsyncIterator[Platforms]:
    """Both connectors on, both policies `open` unless `extra` says otherwise."""
    async with contextlib.AsyncExitStack() as stack:
        if tg is None:
            tg = await stack.enter_async_context(fake_telegram())
        if wa is None:
            wa = await stack.enter_async_context(fake_graph())
        values: dict[str, Any] = {
            "telegram_policy": "open",
            "whatsapp_policy": "open",
            "delivery_retry_base_seconds": 0.01,
        }
        values |= telegram_settings(tg) | whatsapp_settings(wa) | extra
        settings = make_settings(database_url, tmp_path, llm, **values)
        gw = await stack.enter_async_context(running_gateway(settings, clock=clock))
        yield Platforms(gw, tg, wa)
