"""The Telegram connector: verify and take updates in, send replies out.

Updates arrive on our own route (`POST /webhooks/telegram`, the secret token header
checked in constant time) or by long polling; either way an update is acknowledged
only once the core has committed its message. Replies go out as plain text with
entities for the model's Markdown (never a parse mode, which fails on unescaped model
output), split at 4096 UTF-16 units, and without link previews. A reply shows while it
is written: as a draft in a private chat, and in a group (where the operator turns it
on) as one message edited as it grows, finished by editing the reply's first part in.
"""

# No `from __future__ import annotations`: FastAPI must evaluate the route signatures.

import contextlib
import hmac
import os
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Protocol

import structlog
from fastapi import APIRouter, Header, HTTPException, Request, Response, status
from telegram import Bot, LinkPreviewOptions, ReplyParameters, Update, WebhookInfo
from telegram.constants import ChatAction
from telegram.error import BadRequest, ChatMigrated, InvalidToken, TelegramError

from connectors.telegram.bot_request import AiohttpRequest
from connectors.telegram.errors import delivery_error, file_error
from connectors.telegram.formatting import to_entities
from connectors.telegram.normalize import (
    CHANNEL,
    BotUser,
    is_group,
    message_key,
    migration,
    normalize,
)
from connectors.telegram.polling import Poller
from gateway.sdk import (
    NO_SOCKETS,
    AccessRefused,
    Capabilities,
    ChatRef,
    ConfigError,
    DeliveryError,
    Finding,
    GroupMoves,
    InputError,
    MediaRefused,
    Outbound,
    Pace,
    Receiving,
    Singleton,
    Singletons,
    TelegramMode,
    TelegramSettings,
    Undeliverable,
    load_platform_json,
    split_text,
    utf16_length,
)

log = structlog.get_logger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
WEBHOOK_PATH = "/webhooks/telegram"
ALLOWED_UPDATES = ("message", "edited_message")
MAX_CHARS = 4096
# Telegram's (unpublished) limits: about one message a second per chat, 20 a minute
# per group, 30 a second overall.
CHAT_INTERVAL = 1.0
GROUP_INTERVAL = 3.0
BOT_INTERVAL = 1 / 30
# On every message: Telegram's servers fetch a link to preview it, and a one-time link
# (an `/export`) is spent by that fetch before the person taps it. Which link in a reply
# is one-time is not known when sending (the model may repeat one it was given).
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)


_REJECTED = "PARLEY_TELEGRAM_TOKEN: Telegram rejected the bot token (copy it again from @BotFather)"


def _unreachable(exc: TelegramError) -> str:
    return (
        f"Telegram did not answer as expected ({exc.message}): check PARLEY_TELEGRAM_API_URL "
        "and the network"
    )


class PreviewGone(Exception):
    """The message a preview was edited in is no longer there (someone deleted it)."""


class TelegramCore(Receiving, GroupMoves, Singletons, Protocol):
    """The roles of the core this connector uses: updates in, a group that became a
    supergroup, and one poller at a time."""


def create(settings: TelegramSettings) -> "TelegramConnector":
    # Opt in to PTB 23's time periods (`RetryAfter.retry_after` as a timedelta) now;
    # otherwise PTB 22 warns from inside its own error class on every 429.
    os.environ.setdefault("PTB_TIMEDELTA", "true")
    api = settings.api_url.rstrip("/")
    bot = Bot(
        settings.token.get_secret_value(),
        base_url=f"{api}/bot",
        base_file_url=f"{api}/file/bot",
        request=AiohttpRequest(api),
        # One long poll at a time (Telegram allows no more), as PTB's own default.
        get_updates_request=AiohttpRequest(api, connections=1),
    )
    return TelegramConnector(settings, bot)


class TelegramConnector:
    channel = CHANNEL
    core: TelegramCore  # given by start()

    def __init__(self, settings: TelegramSettings, bot: Bot) -> None:
        self.settings = settings
        self.bot = bot
        # `sendChatAction` shows "typing…" for at most 5 seconds.
        self.capabilities = Capabilities(
            max_length=MAX_CHARS,
            measure=utf16_length,
            typing_interval=4.0,
            drafts=True,
            edits=True,
            stream_edits=settings.stream_edits,
        )
        self._me: BotUser | None = None
        # Groups that became supergroups: replies follow them to their new id.
        self._migrated: dict[int, int] = {}
        self._poller: Singleton | None = None
        self.router = _router(self) if settings.mode is TelegramMode.WEBHOOK else None
        self.sockets = NO_SOCKETS

    # -- lifecycle --------------------------------------------------------------------

    async def start(self, core: TelegramCore) -> None:
        self.core = core
        try:
            await self.bot.initialize()
        except InvalidToken:
            # PTB's own message quotes the token; ours names the setting instead.
            raise ConfigError(
                "invalid setting PARLEY_TELEGRAM_TOKEN: Telegram rejected the bot token"
            ) from None
        except TelegramError as exc:
            log.warning("Telegram is unreachable; will try again when needed", error=str(exc))
        else:
            self._me = BotUser(self.bot.id, self.bot.username)
        if self.settings.mode is TelegramMode.POLLING:
            # One replica polls (Telegram allows one getUpdates at a time per bot).
            poller = Poller(self.bot, self.handle, ALLOWED_UPDATES)
            self._poller = core.singleton(
                "telegram-polling", poller.start, poller.stop, state=poller.state
            )
        elif (url := self.webhook_url()) is not None:
            await self._set_webhook(url)

    async def stop(self) -> None:
        if self._poller is not None:
            await self._poller.close()
        await self.bot.shutdown()

    # -- set-up (`parley doctor`, `parley telegram webhook …`) --------------------------

    def webhook_url(self) -> str | None:
        """Where Telegram should post updates: None without PARLEY_PUBLIC_URL."""
        public = self.settings.public_url
        return None if not public else public.rstrip("/") + WEBHOOK_PATH

    async def diagnose(self) -> list[Finding]:
        try:
            async with self.bot:  # getMe: the token
                me = self.bot.username
                info = await self.bot.get_webhook_info()
        except InvalidToken:
            return [Finding("Telegram bot", False, _REJECTED)]
        except TelegramError as exc:
            return [Finding("Telegram bot", False, _unreachable(exc))]
        return [Finding("Telegram bot", True, f"@{me}"), self._webhook_finding(info)]

    def _webhook_finding(self, info: WebhookInfo) -> Finding:
        name = "Telegram webhook"
        if self.settings.mode is TelegramMode.POLLING:
            if info.url:
                return Finding(
                    name,
                    False,
                    f"registered at {info.url}, so polling gets nothing: run "
                    "`parley telegram webhook delete`",
                )
            return Finding(name, True, "none (PARLEY_TELEGRAM_MODE=polling)")
        expected = self.webhook_url()
        if expected is None:
            if info.url:
                return Finding(name, True, f"{info.url} (registered by hand)")
            return Finding(
                name,
                False,
                "none is registered and PARLEY_PUBLIC_URL is unset: set it to this "
                "gateway's public HTTPS address and run `parley telegram webhook set`, or use "
                "PARLEY_TELEGRAM_MODE=polling",
            )
        if info.url != expected:
            return Finding(
                name,
                False,
                f"registered at {info.url or 'nothing'}, not {expected}: run "
                "`parley telegram webhook set`",
            )
        if info.last_error_message:
            return Finding(
                name,
                False,
                f"Telegram's last post to {expected} failed: {info.last_error_message} "
                f"({info.pending_update_count} updates waiting); is the gateway reachable "
                "there over HTTPS?",
            )
        return Finding(name, True, f"{expected} ({info.pending_update_count} updates waiting)")

    async def register_webhook(self) -> str:
        """Tell Telegram to post updates to PARLEY_PUBLIC_URL, with the secret."""
        url, secret = self.webhook_url(), self.settings.webhook_secret
        if url is None or secret is None:
            raise ConfigError(
                "set PARLEY_PUBLIC_URL (this gateway's public HTTPS address) and "
                "PARLEY_TELEGRAM_WEBHOOK_SECRET first"
            )
        async with self._setting_up():
            await self.bot.set_webhook(
                url, secret_token=secret.get_secret_value(), allowed_updates=ALLOWED_UPDATES
            )
        return f"Telegram posts updates to {url} now"

    async def describe_webhook(self) -> str:
        async with self._setting_up():
            info = await self.bot.get_webhook_info()
        if not info.url:
            return "no webhook is registered (updates wait for polling)"
        lines = [f"url: {info.url}", f"updates waiting: {info.pending_update_count}"]
        if info.last_error_message:
            lines.append(f"last error: {info.last_error_message}")
        return "\n".join(lines)

    async def remove_webhook(self) -> str:
        async with self._setting_up():
            await self.bot.delete_webhook()
        return "no webhook is registered now (updates wait for polling)"

    @contextlib.asynccontextmanager
    async def _setting_up(self) -> AsyncIterator[None]:
        try:
            async with self.bot:
                yield
        except InvalidToken:
            raise ConfigError(_REJECTED) from None
        except TelegramError as exc:
            raise ConfigError(_unreachable(exc)) from None

    async def _set_webhook(self, url: str) -> None:
        secret = self.settings.webhook_secret
        assert secret is not None  # settings require it in webhook mode
        try:
            await self.bot.set_webhook(
                url, secret_token=secret.get_secret_value(), allowed_updates=ALLOWED_UPDATES
            )
        except TelegramError as exc:
            log.error("could not register the Telegram webhook", url=url, error=str(exc))
        else:
            log.info("Telegram webhook registered", url=url)

    # -- intake -----------------------------------------------------------------------

    def verify_secret(self, given: str | None) -> None:
        secret = self.settings.webhook_secret
        if given is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, f"missing {SECRET_HEADER}")
        expected = b"" if secret is None else secret.get_secret_value().encode()
        if not expected or not hmac.compare_digest(given.encode(), expected):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"wrong {SECRET_HEADER}")

    async def take(self, body: bytes) -> None:
        """Read a signed webhook body and hand its update to the core; `InputError` if it
        is not an update Parley can read.

        NaN, Infinity or an integer past 64 bits in a field Parley reads (an id, the
        update's own id) leaves the update unreadable for good: it is acknowledged and
        ignored with a log line, since Telegram would only send the same numbers again.
        """
        parsed = load_platform_json(body)
        try:
            await self.handle(self._update(parsed.data))
        except InputError as exc:
            if not parsed.nulled_numbers:
                raise
            log.warning(
                "ignored a Telegram update with numbers Parley cannot read",
                reason=str(exc),
                numbers=parsed.nulled_numbers,
            )

    def _update(self, data: object) -> Update:
        if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
            raise InputError("not a Telegram update")
        try:
            # PTB builds objects from whatever it is given and fails with whatever
            # Python raises on a wrong shape.
            return Update.de_json(data, self.bot)
        except (TypeError, KeyError, AttributeError, ValueError, OverflowError):
            raise InputError("not a Telegram update") from None

    async def handle(self, update: Update) -> None:
        """Hand an update's message to the core; returns once it is committed."""
        me = await self._bot_user() if is_group(update) else self._me
        try:
            moved = migration(update)
            inbound = None if moved else normalize(update, me)
        except (TypeError, AttributeError, ValueError, KeyError, OverflowError) as exc:
            # PTB builds objects from any JSON without checking types; what
            # `normalize` cannot read is not an update we understand.
            raise InputError(f"not a Telegram update ({type(exc).__name__})") from None
        if moved is not None:
            await self._group_moved(*moved)
        if inbound is None:
            return
        with contextlib.suppress(AccessRefused):  # the core has answered the person
            await self.core.receive(inbound)

    async def _bot_user(self) -> BotUser | None:
        if self._me is None:
            try:
                me = await self.bot.get_me()
            except TelegramError as exc:
                log.warning("Telegram getMe failed", error=str(exc))
                return None
            self._me = BotUser(me.id, me.username or "")
        return self._me

    # -- output -----------------------------------------------------------------------

    def measure(self, text: str) -> int:
        return utf16_length(text)

    def pacing(self, outbound: Outbound) -> Sequence[Pace]:
        target = self._target(outbound.group_id, outbound.external_user_id)
        interval = GROUP_INTERVAL if outbound.group_id else CHAT_INTERVAL
        return (Pace((CHANNEL, target), interval), Pace((CHANNEL,), BOT_INTERVAL))

    async def fetch_file(self, ref: str, limit: int) -> bytes:
        try:
            file = await self.bot.get_file(ref)
            if file.file_size is not None and file.file_size > limit:
                raise MediaRefused("too_large", f"the file is larger than {limit} bytes")
            data = bytes(await file.download_as_bytearray())
        except TelegramError as exc:  # PTB's, network errors included
            raise file_error(exc) from None
        if len(data) > limit:
            raise MediaRefused("too_large", f"the file is larger than {limit} bytes")
        return data

    async def send(self, outbound: Outbound) -> str | None:
        if outbound.replaces is not None:
            try:
                await self._edit(outbound.replaces, outbound.text)
            except PreviewGone:
                pass  # deleted meanwhile: the part goes out as a new message
            else:
                return outbound.replaces
        # In a group, the first part answers the message visibly; in a private chat
        # the answer is plain.
        answers = outbound.reply_to_platform_id if outbound.part == 0 else None
        return await self._send(outbound.chat, outbound.text, answers)

    async def _send(self, chat: ChatRef, markdown: str, answers: str | None) -> str:
        target = self._target(chat.group_id, chat.external_user_id)
        reply = None
        if chat.group_id and answers:
            _, _, message_id = answers.partition(":")
            if message_id.isdigit():
                reply = ReplyParameters(int(message_id), allow_sending_without_reply=True)
        text, entities = to_entities(markdown)
        try:
            sent = await self.bot.send_message(
                target,
                text,
                entities=entities,
                reply_parameters=reply,
                link_preview_options=NO_PREVIEW,
            )
        except TelegramError as exc:
            raise await self._delivery_error(target, exc) from None
        return message_key(sent.chat.id, sent.message_id)

    async def _edit(self, key: str, markdown: str) -> None:
        """Show `markdown` in the message `key` (chat:message) instead."""
        chat_id, _, message_id = key.partition(":")
        text, entities = to_entities(markdown)
        try:
            await self.bot.edit_message_text(
                text,
                chat_id=int(chat_id),
                message_id=int(message_id),
                entities=entities,
                link_preview_options=NO_PREVIEW,
            )
        except BadRequest as exc:
            reason = exc.message.lower()
            if "message is not modified" in reason:
                return  # it shows this already
            if "message to edit not found" in reason:
                raise PreviewGone(key) from None
            raise delivery_error(exc) from None
        except TelegramError as exc:
            raise await self._delivery_error(int(chat_id), exc) from None

    async def notify(self, chat: ChatRef, text: str) -> None:
        target = self._target(chat.group_id, chat.external_user_id)
        try:
            await self.bot.send_message(target, text, link_preview_options=NO_PREVIEW)
        except TelegramError as exc:
            raise await self._delivery_error(target, exc) from None

    async def typing(self, chat: ChatRef) -> None:
        target = self._target(chat.group_id, chat.external_user_id)
        try:
            await self.bot.send_chat_action(target, ChatAction.TYPING)
        except TelegramError as exc:
            raise await self._delivery_error(target, exc) from None

    def cut(self, text: str) -> str:
        """What a draft shows of a reply: its first part, as it will be sent."""
        parts = split_text(text, MAX_CHARS, utf16_length)
        return parts[0] if parts else ""

    async def draft(self, chat: ChatRef, draft_id: int, text: str) -> None:
        """The reply so far as a draft in a private chat (groups have none)."""
        target = self._target(chat.group_id, chat.external_user_id)
        shown, entities = to_entities(text)
        try:
            await self.bot.send_message_draft(target, draft_id, shown, entities=entities)
        except TelegramError as exc:
            raise delivery_error(exc) from None

    def edit_interval(self, chat: ChatRef) -> float:
        return GROUP_INTERVAL if chat.group_id else CHAT_INTERVAL

    async def open_preview(self, chat: ChatRef, text: str) -> str:
        """The reply so far, as the message it will be edited into."""
        return await self._send(chat, text, chat.platform_message_id)

    async def edit_preview(self, chat: ChatRef, platform_id: str, text: str) -> None:
        try:
            await self._edit(platform_id, text)
        except PreviewGone:
            raise Undeliverable("the preview message was deleted") from None

    def _target(self, group_id: str | None, user_id: str) -> int:
        target = int(group_id or user_id)
        return self._migrated.get(target, target)

    async def _delivery_error(self, target: int, exc: TelegramError) -> DeliveryError:
        if isinstance(exc, ChatMigrated):
            await self._group_moved(target, exc.new_chat_id)
            return DeliveryError("the group became a supergroup; sending to its new id")
        return delivery_error(exc)

    async def _group_moved(self, old: int, new: int) -> None:
        """A group became a supergroup: sends still addressed to its old id go to the
        new one, and so does the group's conversation (stored, for every replica)."""
        self._migrated[old] = new
        await self.core.group_moved(CHANNEL, str(old), str(new))


def _router(connector: TelegramConnector) -> APIRouter:
    router = APIRouter(tags=["telegram"])

    @router.post(WEBHOOK_PATH, include_in_schema=False)
    async def webhook(
        request: Request,
        secret: Annotated[str | None, Header(alias=SECRET_HEADER)] = None,
    ) -> Response:
        connector.verify_secret(secret)
        try:
            await connector.take(await request.body())
        except InputError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        return Response(status_code=status.HTTP_200_OK)

    return router
