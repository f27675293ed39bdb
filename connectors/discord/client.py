"""discord.py's client, pointed at the REST root and gateway our settings name.

discord.py keeps both in class attributes (`Route.BASE`, `DiscordWebSocket.
DEFAULT_GATEWAY`); setting those would point every client in the process at one place.
Instead this client's own HTTP client rewrites the two prefixes on the way out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route

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

    def _get_state(self, **options: Any) -> Any:
        # Called by discord.Client.__init__ before anything holds its HTTP client.
        self.http = _RebasedHTTP(self, **self._urls)
        return super()._get_state(**options)

    async def on_message(self, message: discord.Message) -> None:
        await self._handler(message)

    async def on_ready(self) -> None:
        await self._connected()

    async def on_resumed(self) -> None:
        await self._connected()
