"""Discord: messages come over the gateway connection (held by one replica, the leader),
replies go out over REST (from any replica).

The gateway does not replay what was said while the bot was away. Each chat's
watermark (the last message stored there) is kept in the database, and on every
READY and RESUMED the history after it is read, newest first and bounded by count and
age, and stored as live messages are (stored once: the message id is the key); a
conversation with several missed messages gets one turn for them all. A chat never
seen has no watermark: a fresh install replays nothing.

DMs join the person's own conversation; a guild channel or thread is a group
conversation, answered when the bot is mentioned or replied to. Each reply part carries
a nonce made from the reply and the part, with `enforce_nonce`, so a part resent after a
crash inside the send is dropped by Discord itself. Where the operator turns it on, a
reply shows while it is written in one message, edited as it grows (code blocks kept
closed) and finished by editing the reply's first part in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

import aiohttp
import discord
import httpx
import structlog
from discord.http import Route
from fastapi import APIRouter

from connectors.discord.client import ParleyClient
from connectors.discord.normalize import CHANNEL, normalize
from gateway.sdk import (
    NO_SOCKETS,
    AccessRefused,
    Capabilities,
    ChatRef,
    Clocked,
    ConfigError,
    DeliveryError,
    DiscordSettings,
    FileUnavailable,
    Finding,
    InputError,
    MediaRefused,
    Outbound,
    Pace,
    Place,
    Receiving,
    Singleton,
    Singletons,
    Undeliverable,
    Watermarks,
    client_session,
    close_fences,
    full_jitter,
    read_at_most,
    split_text,
)

log = structlog.get_logger(__name__)

MAX_CHARS = 2000
# Discord's limits: 5 messages per 5 s in a channel, 50 requests per second per bot.
CHANNEL_INTERVAL = 1.0
BOT_INTERVAL = 0.02
TYPING_SECONDS = 8.0  # a typing indicator shows for 10 s
# Edits share a channel's 5 per 5 s: a preview takes at most 4, leaving the reply room.
PREVIEW_INTERVAL = 1.25
RECONNECT_BASE_SECONDS = 1.0
RECONNECT_MAX_SECONDS = 60.0
# A message flag, on every message: Discord's servers fetch a link to embed it, and a
# one-time link (an `/export`) is spent by that fetch before the person clicks it.
# Which link in a reply is one-time is not known when sending.
SUPPRESS_EMBEDS = 1 << 2
# Application flags: the Message Content intent switched on (verified apps, others).
MESSAGE_CONTENT = 1 << 18
MESSAGE_CONTENT_LIMITED = 1 << 19
_TOKEN_REFUSED = (
    "PARLEY_DISCORD_TOKEN: Discord rejected the bot token (reset and copy it under Bot in "
    "the developer portal)"
)
PORTAL_SWITCH = (
    "Discord refused the message content intent: switch on 'Message Content Intent' under "
    "Bot → Privileged Gateway Intents in the developer portal"
)


class DiscordCore(Receiving, Watermarks, Singletons, Clocked, Protocol):
    """The roles of the core this connector uses: messages in, each chat's watermark
    and the catch-up after it, one gateway connection at a time, and the clock that
    bounds how far back a catch-up reads."""


def create(settings: DiscordSettings) -> DiscordConnector:
    return DiscordConnector(settings)


class DiscordConnector:
    channel = CHANNEL
    router: APIRouter | None = None
    sockets = NO_SOCKETS
    core: DiscordCore  # given by start()

    def __init__(self, settings: DiscordSettings) -> None:
        self.capabilities = Capabilities(
            max_length=MAX_CHARS,
            typing_interval=TYPING_SECONDS,
            edits=True,
            stream_edits=settings.stream_edits,
        )
        self._token = settings.token.get_secret_value()
        self._api_url = settings.api_url
        self._gateway_url = settings.gateway_url
        self._client: ParleyClient | None = None
        self._me = 0
        self._connection: asyncio.Task[None] | None = None
        self._leader: Singleton | None = None
        self._dm_channels: dict[str, int] = {}  # user id -> DM channel id
        self._backfill_within = timedelta(hours=settings.backfill_hours)
        self._backfill_messages = settings.backfill_messages
        self._catching_up = asyncio.Lock()
        # Set when a catch-up has finished (readiness, and tests that need the session's
        # first one behind them).
        self.caught_up = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------

    async def start(self, core: DiscordCore) -> None:
        self.core = core
        client = ParleyClient(
            api_url=self._api_url,
            gateway_url=self._gateway_url,
            handler=self.handle,
            connected=self.catch_up,
        )
        self._client = client
        try:
            await client.login(self._token)  # REST, on every replica: replies go out here
        except discord.LoginFailure:
            await client.close()  # a connector that fails to start holds nothing
            raise ConfigError(
                "invalid setting PARLEY_DISCORD_TOKEN: Discord rejected the bot token"
            ) from None
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("Discord is unreachable; will try again when needed", error=str(exc))
        if client.user is not None:
            self._me = client.user.id
        # Discord allows one gateway connection per bot (unsharded): one replica holds it.
        self._leader = core.singleton(
            "discord-gateway", self._connect, self._disconnect, state=self._state
        )

    async def stop(self) -> None:
        if self._leader is not None:
            await self._leader.close()
        if self._client is not None:
            await self._client.close()

    def _state(self) -> str:
        if self._connection is None or self._connection.done():
            return "stopped: see the log"  # a token or intent Discord refuses
        return (
            "connected" if self._client is not None and self._client.connected else "reconnecting"
        )

    async def _connect(self) -> None:
        assert self._client is not None
        self._connection = asyncio.create_task(self._run(self._client), name="discord:gateway")

    async def _run(self, client: ParleyClient) -> None:
        """Hold the connection. discord.py reconnects and resumes by itself; what it
        gives up on (Discord unreachable at start, a close it cannot handle) is tried
        again here with backoff, unless retrying cannot help."""
        failures = 0
        while True:
            try:
                if client.user is None:  # Discord was unreachable at start
                    await client.login(self._token)
                    self._me = client.user.id if client.user is not None else 0
                await client.connect(reconnect=True)
                return  # closed on purpose
            except discord.PrivilegedIntentsRequired:
                log.error(PORTAL_SWITCH)
                return
            except discord.LoginFailure:
                log.error("invalid setting PARLEY_DISCORD_TOKEN: Discord rejected the bot token")
                return
            except (
                discord.HTTPException,
                discord.ConnectionClosed,
                aiohttp.ClientError,
                OSError,
            ) as exc:
                failures += 1
                wait = full_jitter(failures, RECONNECT_BASE_SECONDS, RECONNECT_MAX_SECONDS)
                log.warning("lost the Discord gateway connection", error=str(exc), seconds=wait)
                await asyncio.sleep(wait)

    async def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connection
        if self._client is not None and self._client.ws is not None:
            await self._client.ws.close(code=1000)

    # -- intake -----------------------------------------------------------------------

    async def handle(self, message: discord.Message) -> None:
        """A message seen on the gateway: stored (and its turn started) through the core,
        then its chat's watermark moves past it."""
        inbound = normalize(message, self._me)
        if inbound is None:
            return
        try:
            await self.core.receive(inbound)
        except AccessRefused:
            pass  # the core has answered the person
        except InputError as exc:
            log.warning("a Discord message could not be stored", error=str(exc))
        private = inbound.group_id is None
        await self.core.read_up_to(CHANNEL, str(message.channel.id), message.id, private=private)

    async def catch_up(self) -> None:
        """Read what each known chat said since its watermark (a session began or
        resumed) and store it; one catch-up at a time."""
        async with self._catching_up:
            for place in await self.core.places(CHANNEL, within=self._backfill_within):
                try:
                    missed = await self._missed(place)
                except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
                    log.warning("could not read a Discord chat's history", error=str(exc))
                    continue
                if not missed:
                    continue
                inbounds = [normalize(m, self._me, private=place.private) for m in missed]
                await self.core.backfill([i for i in inbounds if i is not None])
                newest = max(m.id for m in missed)
                await self.core.read_up_to(CHANNEL, place.place, newest, private=place.private)
                log.info("read what a Discord chat said while away", messages=len(missed))
            self.caught_up.set()

    async def _missed(self, place: Place) -> list[discord.Message]:
        """The newest messages after the watermark and within the age bound, oldest
        first."""
        client = self._ready_client()
        oldest = self.core.clock.now() - self._backfill_within
        channel = client.get_partial_messageable(int(place.place))
        missed = []
        async for message in channel.history(limit=self._backfill_messages):  # newest first
            if message.id <= place.position or message.created_at < oldest:
                break
            missed.append(message)
        return missed[::-1]

    # -- set-up (`parley doctor`) -----------------------------------------------------

    async def diagnose(self) -> list[Finding]:
        headers = {"Authorization": f"Bot {self._token}"}
        try:
            async with httpx.AsyncClient(
                base_url=self._api_url, headers=headers, timeout=10
            ) as api:
                me = await api.get("users/@me")
                app = await api.get("oauth2/applications/@me") if me.is_success else None
        except httpx.HTTPError as exc:
            return [
                Finding(
                    "Discord bot",
                    False,
                    f"Discord did not answer ({type(exc).__name__}): check "
                    "PARLEY_DISCORD_API_URL and the network",
                )
            ]
        if me.status_code == 401:
            return [Finding("Discord bot", False, _TOKEN_REFUSED)]
        if app is None or not app.is_success:
            status = me.status_code if app is None else app.status_code
            return [Finding("Discord bot", False, f"Discord answered {status}: try again later")]
        found = [Finding("Discord bot", True, str(me.json().get("username", "")))]
        flags = int(app.json().get("flags") or 0)
        if flags & (MESSAGE_CONTENT | MESSAGE_CONTENT_LIMITED):
            found.append(Finding("Discord message content", True, "the intent is on"))
        else:
            found.append(Finding("Discord message content", False, PORTAL_SWITCH))
        return found

    # -- output -----------------------------------------------------------------------

    def pacing(self, outbound: Outbound) -> Sequence[Pace]:
        where = outbound.group_id or f"dm:{outbound.external_user_id}"
        return (Pace((CHANNEL, where), CHANNEL_INTERVAL), Pace((CHANNEL,), BOT_INTERVAL))

    async def send(self, outbound: Outbound) -> str | None:
        if outbound.replaces is not None:
            try:
                await self._edit(outbound.chat, outbound.replaces, outbound.text)
            except discord.NotFound:
                pass  # deleted meanwhile: the part goes out as a new message
            else:
                return outbound.replaces
        payload: dict[str, object] = {
            "content": outbound.text,
            # A model's "@everyone" or "<@id>" pings nobody.
            "allowed_mentions": {"parse": []},
            "flags": SUPPRESS_EMBEDS,
            "nonce": f"p{outbound.message_id}.{outbound.part}",  # at most 25 characters
            "enforce_nonce": True,
        }
        if outbound.group_id and outbound.part == 0 and outbound.reply_to_platform_id:
            # In a channel the first part answers the message visibly.
            payload["message_reference"] = {
                "message_id": outbound.reply_to_platform_id,
                "fail_if_not_exists": False,
            }
        sent = await self._post(await self._channel_of(outbound.chat), payload)
        return str(sent["id"])

    def cut(self, text: str) -> str:
        """What a preview shows of a reply: its first part, as it will be sent, with a
        code block still being written closed."""
        parts = split_text(text, MAX_CHARS)
        return close_fences(parts[0]) if parts else ""

    def edit_interval(self, chat: ChatRef) -> float:
        return PREVIEW_INTERVAL

    async def open_preview(self, chat: ChatRef, text: str) -> str:
        payload: dict[str, object] = {
            "content": text,
            "allowed_mentions": {"parse": []},
            "flags": SUPPRESS_EMBEDS,
        }
        if chat.group_id and chat.platform_message_id:
            payload["message_reference"] = {
                "message_id": chat.platform_message_id,
                "fail_if_not_exists": False,
            }
        sent = await self._post(await self._channel_of(chat), payload)
        return str(sent["id"])

    async def edit_preview(self, chat: ChatRef, platform_id: str, text: str) -> None:
        try:
            await self._edit(chat, platform_id, text)
        except discord.NotFound:
            raise Undeliverable("the preview message was deleted") from None

    async def _edit(self, chat: ChatRef, platform_id: str, text: str) -> None:
        """Show `text` in the message `platform_id` instead (`discord.NotFound`: it is
        gone)."""
        client = self._ready_client()
        route = Route(
            "PATCH",
            "/channels/{channel_id}/messages/{message_id}",
            channel_id=await self._channel_of(chat),
            message_id=int(platform_id),
        )
        payload = {"content": text, "allowed_mentions": {"parse": []}, "flags": SUPPRESS_EMBEDS}
        try:
            await client.http.request(route, json=payload)
        except discord.NotFound:
            raise
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise _delivery_error(exc) from None

    async def notify(self, chat: ChatRef, text: str) -> None:
        payload: dict[str, object] = {
            "content": text,
            "allowed_mentions": {"parse": []},
            "flags": SUPPRESS_EMBEDS,
        }
        await self._post(await self._channel_of(chat), payload)

    async def typing(self, chat: ChatRef) -> None:
        client = self._ready_client()
        channel_id = await self._channel_of(chat)
        try:
            await client.http.send_typing(channel_id)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise _delivery_error(exc) from None

    async def _channel_of(self, chat: ChatRef) -> int:
        if chat.group_id is not None:
            return int(chat.group_id)
        known = self._dm_channels.get(chat.external_user_id)
        if known is not None:
            return known
        client = self._ready_client()
        try:
            channel = await client.http.start_private_message(int(chat.external_user_id))
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise _delivery_error(exc) from None
        self._dm_channels[chat.external_user_id] = int(channel["id"])
        return int(channel["id"])

    async def _post(self, channel_id: int, payload: dict[str, object]) -> dict[str, object]:
        client = self._ready_client()
        route = Route("POST", "/channels/{channel_id}/messages", channel_id=channel_id)
        try:
            sent: dict[str, object] = await client.http.request(route, json=payload)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise _delivery_error(exc) from None
        return sent

    async def fetch_file(self, ref: str, limit: int) -> bytes:
        # The message is read again for the attachment's URL: a signed one, which lapses.
        try:
            channel_id, message_id, attachment_id = (int(part) for part in ref.split("/"))
        except ValueError:
            raise FileUnavailable("not a Discord attachment", transient=False) from None
        try:
            client = self._ready_client()
        except DeliveryError as exc:
            raise FileUnavailable(str(exc), transient=True) from None
        try:
            found = await client.http.get_message(channel_id, message_id)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            error = _delivery_error(exc)
            raise FileUnavailable(
                f"Discord gave no message: {error}", transient=not isinstance(error, Undeliverable)
            ) from None
        attachment = next(
            (a for a in found.get("attachments", []) if a.get("id") == str(attachment_id)), None
        )
        if attachment is None:
            raise FileUnavailable("the attachment is gone from its message", transient=False)
        if int(attachment.get("size") or 0) > limit:
            raise MediaRefused("too_large", f"the file is larger than {limit} bytes")
        return await download(str(attachment.get("url", "")), limit)

    def _ready_client(self) -> ParleyClient:
        if self._client is None:
            raise DeliveryError("the Discord connector has not started")
        return self._client


def _delivery_error(exc: Exception) -> DeliveryError:
    """Refusals (forbidden, not found, bad request) are final; a server error or a lost
    connection is worth another try. discord.py has waited out 429s by itself."""
    if isinstance(exc, discord.HTTPException) and exc.status in (400, 401, 403, 404):
        return Undeliverable(f"Discord refused the message: {exc.status} {exc.text}")
    return DeliveryError(f"Discord did not take the message: {exc}")


async def download(url: str, limit: int) -> bytes:
    """An attachment from Discord's CDN (no token goes with it), read no further than
    `limit`."""
    if not url.startswith(("https://", "http://")):
        raise FileUnavailable("Discord gave no URL for the attachment", transient=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=30.0)
    async with client_session(url, timeout) as http:
        return await read_at_most(http, url, limit, where="Discord's CDN")
