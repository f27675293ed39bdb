"""discord.py's client, pointed at the REST root and gateway our settings name.

discord.py keeps both in class attributes (`Route.BASE`, `DiscordWebSocket.
DEFAULT_GATEWAY`); setting those would point every client in the process at one place.
Instead this client's own HTTP client rewrites the two prefixes on the way out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
import discord
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route

from gateway.sdk import finish_or_cancel

EVENTS_DEADLINE_SECONDS = 5.0
MessageHandler = Callable[[discord.Message], Awaitable[None]]
ConnectedHandler = Callable[[], Awaitable[None]]


class _RebasedHTTP(HTTPClient):
    def __init__(self, client: discord.Client, *, api_url: str, gateway_url: str) -> None:
        super().__init__(client.loop)
        self._api_url = api_url.rstrip("/")
        self._gateway_url = gateway_url

    async def request(self, route: Route, **kwargs: Any) -> Any:
        route.url = self._api_url + route.url.removeprefix(Route.BASE)
        return await super().request(route, **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
        default = str(DiscordWebSocket.DEFAULT_GATEWAY)
        if url.startswith(default):  # the query (version, encoding) stays
            url = self._gateway_url + url.removeprefix(default)
        return await super().ws_connect(url, compress=compress)


class ParleyClient(discord.Client):
    """Hands every message it sees to `handler`, and says when a session starts or
    resumes (`connected`: what was missed meanwhile is read then)."""

    def __init__(
        self,
        *,
        api_url: str,
        gateway_url: str,
        handler: MessageHandler,
        connected: ConnectedHandler,
    ) -> None:
        self._urls = {"api_url": api_url, "gateway_url": gateway_url}
        intents = discord.Intents.default()
        intents.message_content = True  # also switched on in the developer portal
        super().__init__(intents=intents)
        self._handler = handler
        self._connected = connected
        # Between a session's READY (or RESUMED) and the connection's loss.
        self.connected = False
        self._events: set[asyncio.Task[Any]] = set()  # handlers discord.py has started

    def _get_state(self, **options: Any) -> Any:
        # Called by discord.Client.__init__ before anything holds its HTTP client.
        self.http = _RebasedHTTP(self, **self._urls)
        return super()._get_state(**options)

    def _schedule_event(
        self,
        coro: Callable[..., Coroutine[Any, Any, Any]],
        event_name: str,
        *args: Any,
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        task = super()._schedule_event(coro, event_name, *args, **kwargs)
        self._events.add(task)
        task.add_done_callback(self._events.discard)
        return task

    async def close(self) -> None:
        """Close, and let the event handlers discord.py started finish (a message being
        stored) or, after a few seconds, cancel them: none is left behind."""
        await super().close()
        await finish_or_cancel(list(self._events), EVENTS_DEADLINE_SECONDS)

    async def on_message(self, message: discord.Message) -> None:
        await self._handler(message)

    async def on_socket_event_type(self, event_type: str) -> None:
        # At the gateway's READY or RESUMED itself: discord.py's own "ready" comes up to
        # 2 s later, after the guild cache fills (not needed here), and can fire after
        # `close()`.
        if event_type in ("READY", "RESUMED"):
            self.connected = True
            await self._connected()

    async def on_disconnect(self) -> None:
        self.connected = False
