"""A fake Discord that the real discord.py client accepts: the REST calls it makes and
the gateway websocket (HELLO, IDENTIFY, READY, GUILD_CREATE, heartbeats, dispatches).

Payload shapes follow Discord's API documentation (v10). Frames go out as text: a
gateway client that asked for `compress=zlib-stream` also takes uncompressed text.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.servers import serve

TOKEN = "ODk5.fake-discord-bot-token.0123456789"
BOT_ID = 900_000_000_000_000_001
APPLICATION_ID = 900_000_000_000_000_002
BOT_NAME = "parley"
MESSAGE_CONTENT = 1 << 15  # the privileged gateway intent

DISCORD_EPOCH_MS = 1_420_070_400_000
_last_snowflake = [0]


def snowflake() -> str:
    """A new id, increasing, that says when it was made (as Discord's do)."""
    made = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
    _last_snowflake[0] = max(made, _last_snowflake[0] + 1)
    return str(_last_snowflake[0])


def user(user_id: int, name: str = "ann", *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": name,
        "discriminator": "0",
        "global_name": name.capitalize(),
        "avatar": None,
        "bot": bot,
    }


BOT_USER = user(BOT_ID, BOT_NAME, bot=True)


def member() -> dict[str, Any]:
    """A guild member object's own fields (the user goes beside them)."""
    return {
        "roles": [],
        "joined_at": "2026-01-01T00:00:00Z",
        "deaf": False,
        "mute": False,
        "flags": 0,
    }


@dataclass(frozen=True)
class Guild:
    id: int
    name: str
    channels: tuple[int, ...]

    def create_event(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "owner_id": "1",
            "unavailable": False,
            "member_count": 2,
            "roles": [{"id": str(self.id), "name": "@everyone", "permissions": "0"}],
            "emojis": [],
            "stickers": [],
            "features": [],
            "members": [{"user": BOT_USER, **member()}],
            "channels": [
                {
                    "id": str(c),
                    "type": 0,
                    "name": f"chat-{c}",
                    "position": i,
                    "guild_id": str(self.id),
                }
                for i, c in enumerate(self.channels)
            ],
            "threads": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "joined_at": "2026-01-01T00:00:00Z",
            "large": False,
        }


def message(
    author: dict[str, Any],
    channel_id: int,
    content: str,
    *,
    guild: Guild | None = None,
    mentions: list[dict[str, Any]] | None = None,
    message_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A MESSAGE_CREATE event's data (gateway events carry guild_id and member)."""
    data: dict[str, Any] = {
        "id": message_id or snowflake(),
        "channel_id": str(channel_id),
        "author": author,
        "content": content,
        "timestamp": "2026-12-01T12:00:00.000000+00:00",
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": mentions or [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
        "flags": 0,
    }
    if guild is not None:
        data["guild_id"] = str(guild.id)
        data["member"] = {
            "roles": [],
            "joined_at": "2026-01-01T00:00:00Z",
            "deaf": False,
            "mute": False,
        }
    return data | extra


@dataclass
class Sent:
    channel_id: int
    content: str
    nonce: str | None
    reference: dict[str, Any] | None
    flags: int | None = None  # as sent: None when the message set none
    id: str = ""


@dataclass
class Edit:
    message_id: str
    content: str
    at: float  # time.monotonic() when it arrived


@dataclass
class FakeDiscord:
    base_url: str = ""
    guilds: list[Guild] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    typing: list[int] = field(default_factory=list)
    identifies: int = 0
    # Set by a test: fail the next POST of a message with (status, body, headers).
    fail_next_send: list[tuple[int, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    # What each message the bot sent shows now, edits applied: message id -> content.
    showing: dict[str, str] = field(default_factory=dict)
    # Each channel's messages as Discord keeps them (what a history request pages through).
    history: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    history_requests: list[int] = field(default_factory=list)  # channel ids asked
    resumes: int = 0
    heartbeats: int = 0
    # Short, so heartbeats flow during a test (Discord's is about 41 s).
    heartbeat_interval_ms: int = 250
    # As Discord does when the portal's Message Content Intent switch is off.
    refuse_message_content: bool = False
    # Files people attached, by attachment id, served from a CDN path; the messages
    # that carry them, by id (a REST read of one message); the downloads asked.
    files: dict[str, bytes] = field(default_factory=dict)
    messages: dict[int, dict[str, Any]] = field(default_factory=dict)
    downloads: list[str] = field(default_factory=list)
    _held: asyncio.Event | None = None  # new connections wait for it before HELLO
    _sockets: list[WebSocket] = field(default_factory=list)
    _sequence: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _dm_channels: dict[int, int] = field(default_factory=dict)  # user id -> channel id

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return self.base_url.replace("http", "ws", 1) + "/gateway"

    def app(self) -> Starlette:
        api = "/api/v10"
        return Starlette(
            routes=[
                Route(f"{api}/users/@me", self._me),
                Route(f"{api}/oauth2/applications/@me", self._application),
                Route(f"{api}/gateway", self._gateway),
                Route(f"{api}/gateway/bot", self._gateway),
                Route(f"{api}/users/@me/channels", self._open_dm, methods=["POST"]),
                Route(f"{api}/channels/{{channel_id:int}}/messages", self._send, methods=["POST"]),
                Route(f"{api}/channels/{{channel_id:int}}/messages", self._history),
                Route(
                    f"{api}/channels/{{channel_id:int}}/messages/{{message_id:int}}",
                    self._edit,
                    methods=["PATCH"],
                ),
                Route(
                    f"{api}/channels/{{channel_id:int}}/messages/{{message_id:int}}",
                    self._message,
                ),
                Route("/attachments/{channel_id:int}/{attachment_id}/{name}", self._download),
                Route(f"{api}/channels/{{channel_id:int}}/typing", self._typing, methods=["POST"]),
                WebSocketRoute("/gateway", self._socket),
            ]
        )

    # -- what a test drives ------------------------------------------------------------

    def attach(
        self, data: dict[str, Any], name: str, content: bytes, content_type: str
    ) -> dict[str, Any]:
        """`data` (a message) with a file attached as Discord shows one: a signed CDN URL
        that lapses; the message kept for a REST read of it."""
        attachment_id = snowflake()
        channel_id = data["channel_id"]
        self.files[attachment_id] = content
        data["attachments"].append(
            {
                "id": attachment_id,
                "filename": name,
                "size": len(content),
                "url": f"{self.base_url}/attachments/{channel_id}/{attachment_id}/{name}"
                "?ex=6750a1b2&is=674f5032&hm=0123abcd",
                "proxy_url": f"{self.base_url}/attachments/{channel_id}/{attachment_id}/{name}",
                "content_type": content_type,
            }
        )
        self.messages[int(data["id"])] = data
        return data

    async def _message(self, request: Request) -> Response:
        """`GET /channels/{id}/messages/{id}`: one message, as REST gives it."""
        data = self.messages.get(int(request.path_params["message_id"]))
        if data is None:
            return JSONResponse({"message": "Unknown Message", "code": 10008}, 404)
        return JSONResponse({k: v for k, v in data.items() if k not in ("guild_id", "member")})

    async def _download(self, request: Request) -> Response:
        attachment_id = request.path_params["attachment_id"]
        self.downloads.append(attachment_id)
        if "hm" not in request.query_params:
            return Response(status_code=404)  # unsigned: Discord's CDN serves nothing
        data = self.files.get(attachment_id)
        return Response(status_code=404) if data is None else Response(data)

    def dm_channel(self, user_id: int) -> int:
        """The DM channel between the bot and `user_id` (made on first use)."""
        return self._dm_channels.setdefault(user_id, int(snowflake()))

    def add_history(self, data: dict[str, Any]) -> None:
        """A message Discord kept while no gateway connection heard of it."""
        self.history.setdefault(int(data["channel_id"]), []).append(data)

    async def drop(self) -> None:
        """Close the gateway connection as a network failure would (resumable)."""
        async with self._changed:
            sockets, self._sockets = self._sockets, []
            self.identifies = self.resumes = 0
        for websocket in sockets:
            with contextlib.suppress(RuntimeError):
                await websocket.close(code=4000)

    def hold(self) -> asyncio.Event:
        """New connections wait (no HELLO) until the returned event is set."""
        self._held = asyncio.Event()
        return self._held

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a gateway event to the connected client (a message is kept in its
        channel's history too, once)."""
        await self.connected()
        kept = self.history.get(int(data.get("channel_id", 0)), [])
        if event == "MESSAGE_CREATE" and data not in kept:
            self.add_history(data)
        await self._send_frame(
            self._sockets[-1], {"op": 0, "t": event, "s": next(self._sequence), "d": data}
        )

    async def connected(self, seconds: float = 10.0) -> None:
        """Until a client has identified (or resumed) on a connection."""
        await self.wait_until(
            lambda fake: bool(fake._sockets) and fake.identifies + fake.resumes > 0, seconds
        )

    async def wait_until(
        self, condition: Callable[[FakeDiscord], bool], seconds: float = 10.0
    ) -> None:
        async with asyncio.timeout(seconds), self._changed:
            await self._changed.wait_for(lambda: condition(self))

    def texts(self, channel_id: int) -> list[str]:
        return [s.content for s in self.sent if s.channel_id == channel_id]

    # -- REST --------------------------------------------------------------------------

    async def _me(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bot {TOKEN}":
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, 401)
        return JSONResponse(BOT_USER)

    async def _application(self, _: Request) -> Response:
        return JSONResponse(
            {
                "id": str(APPLICATION_ID),
                "name": BOT_NAME,
                "icon": None,
                "description": "",
                "bot_public": False,
                "bot_require_code_grant": False,
                "verify_key": "0" * 64,
                # GATEWAY_MESSAGE_CONTENT_LIMITED, unless the portal's switch is off.
                "flags": 0 if self.refuse_message_content else 1 << 19,
                "owner": user(1, "owner"),
                "team": None,
            }
        )

    async def _gateway(self, _: Request) -> Response:
        return JSONResponse(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 1000,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    async def _open_dm(self, request: Request) -> Response:
        recipient = int((await request.json())["recipient_id"])
        return JSONResponse(
            {"id": str(self.dm_channel(recipient)), "type": 1, "recipients": [user(recipient)]}
        )

    async def _send(self, request: Request) -> Response:
        channel_id = int(request.path_params["channel_id"])
        body = await request.json()
        if self.fail_next_send:
            status, payload, headers = self.fail_next_send.pop(0)
            return JSONResponse(payload, status, headers=headers)
        sent = Sent(
            channel_id,
            body.get("content", ""),
            body.get("nonce"),
            body.get("message_reference"),
            body.get("flags"),
        )
        created = message(BOT_USER, channel_id, sent.content)
        sent.id = created["id"]
        async with self._changed:
            self.sent.append(sent)
            self.showing[sent.id] = sent.content
            self.add_history(created)
            self._changed.notify_all()
        return JSONResponse(created)

    async def _edit(self, request: Request) -> Response:
        """`PATCH /channels/{id}/messages/{id}`: Unknown Message for one the bot did not
        send; content of at most 2,000 characters."""
        channel_id = int(request.path_params["channel_id"])
        message_id = str(request.path_params["message_id"])
        body = await request.json()
        content = str(body.get("content", ""))
        if message_id not in self.showing:
            return JSONResponse({"message": "Unknown Message", "code": 10008}, 404)
        if len(content) > 2000:
            return JSONResponse({"message": "Invalid Form Body", "code": 50035}, 400)
        async with self._changed:
            self.edits.append(Edit(message_id, content, time.monotonic()))
            self.showing[message_id] = content
            self._changed.notify_all()
        return JSONResponse(message(BOT_USER, channel_id, content) | {"id": message_id})

    def shown(self, channel_id: int) -> list[str]:
        """What the bot's messages in a channel show now (edits applied), in order."""
        return [self.showing[s.id] for s in self.sent if s.channel_id == channel_id]

    async def _history(self, request: Request) -> Response:
        """`GET /channels/{id}/messages`: newest first, `limit` (1-100, default 50) before
        or after a message id; REST message objects carry no guild_id or member."""
        channel_id = int(request.path_params["channel_id"])
        self.history_requests.append(channel_id)
        limit = min(int(request.query_params.get("limit", 50)), 100)
        before, after = request.query_params.get("before"), request.query_params.get("after")
        kept = sorted(self.history.get(channel_id, []), key=lambda m: int(m["id"]), reverse=True)
        if before is not None:
            kept = [m for m in kept if int(m["id"]) < int(before)]
        if after is not None:
            kept = [m for m in kept if int(m["id"]) > int(after)][-limit:]
        rest = [{k: v for k, v in m.items() if k not in ("guild_id", "member")} for m in kept]
        return JSONResponse(rest[:limit])

    async def _typing(self, request: Request) -> Response:
        self.typing.append(int(request.path_params["channel_id"]))
        return Response(status_code=204)

    # -- gateway -----------------------------------------------------------------------

    async def _socket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        if self._held is not None:
            await self._held.wait()
        await self._send_frame(
            websocket,
            {
                "op": 10,
                "d": {"heartbeat_interval": self.heartbeat_interval_ms},
                "s": None,
                "t": None,
            },
        )
        try:
            while True:
                frame = json.loads(await websocket.receive_text())
                await self._on_frame(websocket, frame)
        except WebSocketDisconnect:
            pass
        finally:
            with contextlib.suppress(ValueError):
                self._sockets.remove(websocket)

    async def _on_frame(self, websocket: WebSocket, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        if op == 1:  # heartbeat
            async with self._changed:
                self.heartbeats += 1
                self._changed.notify_all()
            await self._send_frame(websocket, {"op": 11, "d": None, "s": None, "t": None})
        elif op == 2 and self.refuse_message_content and frame["d"]["intents"] & MESSAGE_CONTENT:
            await websocket.close(code=4014)  # Disallowed intent(s)
        elif op == 2:  # identify
            ready = {
                "v": 10,
                "user": BOT_USER,
                "guilds": [{"id": str(g.id), "unavailable": True} for g in self.guilds],
                "session_id": snowflake(),
                "resume_gateway_url": self.gateway_url,
                "application": {"id": str(APPLICATION_ID), "flags": 1 << 19},
                "private_channels": [],
                "relationships": [],
            }
            await self._send_frame(
                websocket, {"op": 0, "t": "READY", "s": next(self._sequence), "d": ready}
            )
            for guild in self.guilds:
                event = {
                    "op": 0,
                    "t": "GUILD_CREATE",
                    "s": next(self._sequence),
                    "d": guild.create_event(),
                }
                await self._send_frame(websocket, event)
            async with self._changed:
                self._sockets.append(websocket)
                self.identifies += 1
                self._changed.notify_all()
        elif op == 6:  # resume: nothing was sent after the client's last seq to replay
            resumed = {"op": 0, "t": "RESUMED", "s": next(self._sequence), "d": {}}
            await self._send_frame(websocket, resumed)
            async with self._changed:
                self._sockets.append(websocket)
                self.resumes += 1
                self._changed.notify_all()

    async def _send_frame(self, websocket: WebSocket, frame: dict[str, Any]) -> None:
        await websocket.send_text(json.dumps(frame))


@contextlib.asynccontextmanager
async def fake_discord(guilds: list[Guild] | None = None) -> AsyncIterator[FakeDiscord]:
    fake = FakeDiscord(guilds=list(guilds or []))
    async with serve(fake.app()) as url:
        fake.base_url = url
        yield fake


def discord_settings(fake: FakeDiscord, **extra: Any) -> dict[str, Any]:
    return {
        "discord_token": TOKEN,
        "discord_api_url": fake.api_url,
        "discord_gateway_url": fake.gateway_url,
    } | extra
