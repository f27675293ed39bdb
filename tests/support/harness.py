"""A real gateway on a real socket, with its model played by a fake server."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin

from gateway.app import create_app
from gateway.clock import Clock
from gateway.services import Services
from gateway.settings import Settings
from tests.fakes.llm_server import FakeLLM
from tests.support.servers import serve

ADMIN_TOKEN = "test-admin-token-0123456789"
HISTORY_PAGE = 500  # the web chat API's largest page


def make_settings(database_url: str, data_dir: Path, llm: FakeLLM | None, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "data_dir": data_dir,
        "admin_token": ADMIN_TOKEN,
        "secret_key": "test-secret-key-0123456789abcdef",
        "llm_retry_base_seconds": 0.01,
        # Tests talk fast; the abuse limits have tests of their own.
        "webchat_sessions_per_minute": 100_000,
        "webchat_messages_per_minute": 100_000,
    }
    if llm is not None:
        values |= llm.settings()
    return Settings(_env_file=None, **(values | extra))


@dataclass
class Gateway:
    url: str
    app: FastAPI
    http: httpx.AsyncClient

    @property
    def services(self) -> Services:
        services: Services = self.app.state.services
        return services

    async def visitor(self) -> tuple[str, str]:
        response = await self.http.post("/webchat/sessions")
        assert response.status_code == 201, response.text
        body = response.json()
        return body["token"], body["conversation_id"]

    async def send(self, token: str, text: str, client_id: str | None = None) -> httpx.Response:
        body: dict[str, Any] = {"text": text}
        if client_id is not None:
            body["client_id"] = client_id
        return await self.http.post(
            "/webchat/messages", json=body, headers={"Authorization": f"Bearer {token}"}
        )

    async def history(self, token: str, after_seq: int = 0) -> list[dict[str, Any]]:
        response = await self.http.get(
            "/webchat/messages",
            params={"after_seq": after_seq, "limit": HISTORY_PAGE},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200, response.text
        messages: list[dict[str, Any]] = response.json()["messages"]
        return messages

    async def whole_history(self, token: str) -> list[dict[str, Any]]:
        """Every message, page after page until a page comes back short."""
        messages: list[dict[str, Any]] = []
        while True:
            page = await self.history(token, after_seq=messages[-1]["seq"] if messages else 0)
            messages += page
            if len(page) < HISTORY_PAGE:
                return messages

    @contextlib.asynccontextmanager
    async def socket(
        self, token: str, *, in_url: bool = False, ready: bool = True, origin: str | None = None
    ) -> AsyncIterator[ClientConnection]:
        """A web chat socket that has sent its `auth` frame (or, `in_url`, the older
        `?token=`), past its `ready` frame; `ready=False`: before it (the first frame is
        `ready`, or the error that refused the token). `origin`: the page's origin a
        browser would send (None: none, like an app or a script)."""
        url = self.url.replace("http", "ws", 1) + "/webchat/ws"
        async with connect(
            url + f"?token={token}" if in_url else url,
            origin=None if origin is None else Origin(origin),
        ) as websocket:
            if not in_url:
                await websocket.send(json.dumps({"type": "auth", "token": token}))
            if ready:
                first = await next_frame(websocket)
                assert first["type"] == "ready", first
            yield websocket


async def next_frame(websocket: ClientConnection, kind: str | None = None) -> dict[str, Any]:
    """The next frame (of `kind`, skipping others)."""
    while True:
        frame: dict[str, Any] = json.loads(await websocket.recv())
        if kind is None or frame["type"] == kind:
            return frame


@contextlib.asynccontextmanager
async def running_gateway(
    settings: Settings, *, clock: Clock | None = None
) -> AsyncIterator[Gateway]:
    app = create_app(settings, clock=clock)
    async with (
        serve(app, settings=settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        yield Gateway(url, app, http)
