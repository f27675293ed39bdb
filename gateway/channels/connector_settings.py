"""Each connector's own settings: the few it reads, cut from the whole `Settings`.

A connector is handed its slice and never the whole, so it cannot read the database
URL, the admin token or another channel's secrets. The environment keeps its names
(`PARLEY_TELEGRAM_TOKEN` is `TelegramSettings.token`) and `Settings` keeps every
check: a slice is cut from settings already validated. Each `*_settings` function
answers None when its channel is not configured, and the registry then never imports
that connector.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from pydantic import SecretStr

from gateway.errors import ConfigError
from gateway.secrets import keys_from
from gateway.settings import Settings, TelegramMode

__all__ = [
    "DiscordSettings",
    "TelegramSettings",
    "WebchatSettings",
    "WhatsAppSettings",
    "discord_settings",
    "telegram_settings",
    "webchat_settings",
    "whatsapp_settings",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramSettings:
    token: SecretStr
    # Required in webhook mode (`Settings` says so), not read when polling.
    webhook_secret: SecretStr | None
    mode: TelegramMode
    api_url: str
    # Parley's public address, where Telegram is told to post updates; None: the
    # webhook is registered by hand.
    public_url: str | None
    # Show a reply as it is written in groups, in one message edited as it grows.
    stream_edits: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscordSettings:
    token: SecretStr
    api_url: str
    gateway_url: str
    # After a reconnect, each chat read within this many hours has its missed messages
    # fetched (at most `backfill_messages` a chat, the newest).
    backfill_hours: float
    backfill_messages: int
    # Show a reply as it is written, in one message edited as it grows.
    stream_edits: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WhatsAppSettings:
    token: SecretStr
    app_secret: SecretStr
    verify_token: SecretStr
    phone_number_id: str
    api_url: str
    # (name, language) of the approved template reminders go out as outside the window.
    reminder_template: tuple[str, str] | None = None
    # Parley's public address, where Meta posts notifications (checked by `doctor`).
    public_url: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WebchatSettings:
    allowed_origins: tuple[str, ...]
    identity_secret: SecretStr | None
    sessions_per_minute: int
    messages_per_minute: int
    uploads_per_minute: int
    # The largest file a visitor may upload.
    media_max_bytes: int
    sockets_per_visitor: int
    max_message_chars: int
    # The largest socket frame taken, as the largest HTTP body is.
    max_body_bytes: int
    reply_wait_seconds: float
    # Reads the keys that sign visitor tokens (the first signs, each verifies). A
    # function, called when the web chat
    # starts: without PARLEY_SECRET_KEY the key is a file it may create in the data
    # dir, and building connectors does no I/O.
    signing_keys: Callable[[], tuple[bytes, ...]]


def telegram_settings(settings: Settings) -> TelegramSettings | None:
    if settings.telegram_token is None:
        return None
    return TelegramSettings(
        token=settings.telegram_token,
        webhook_secret=settings.telegram_webhook_secret,
        mode=settings.telegram_mode,
        api_url=settings.telegram_api_url,
        public_url=settings.public_url,
        stream_edits=settings.telegram_stream_edits,
    )


def discord_settings(settings: Settings) -> DiscordSettings | None:
    if settings.discord_token is None:
        return None
    return DiscordSettings(
        token=settings.discord_token,
        api_url=settings.discord_api_url,
        gateway_url=settings.discord_gateway_url,
        backfill_hours=settings.discord_backfill_hours,
        backfill_messages=settings.discord_backfill_messages,
        stream_edits=settings.discord_stream_edits,
    )


def whatsapp_settings(settings: Settings) -> WhatsAppSettings | None:
    if settings.whatsapp_token is None:
        return None
    return WhatsAppSettings(
        token=settings.whatsapp_token,
        app_secret=_required(settings.whatsapp_app_secret, "whatsapp_app_secret"),
        verify_token=_required(settings.whatsapp_verify_token, "whatsapp_verify_token"),
        phone_number_id=_required(settings.whatsapp_phone_number_id, "whatsapp_phone_number_id"),
        api_url=settings.whatsapp_api_url,
        reminder_template=_template(settings.whatsapp_reminder_template),
        public_url=settings.public_url,
    )


def _template(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    name, _, language = value.partition(":")
    return name, language


def webchat_settings(settings: Settings) -> WebchatSettings:
    """The web chat is always on: it is Parley's own page."""
    return WebchatSettings(
        allowed_origins=settings.webchat_allowed_origins,
        identity_secret=settings.webchat_identity_secret,
        sessions_per_minute=settings.webchat_sessions_per_minute,
        messages_per_minute=settings.webchat_messages_per_minute,
        uploads_per_minute=settings.webchat_uploads_per_minute,
        media_max_bytes=settings.media_max_bytes,
        sockets_per_visitor=settings.webchat_sockets_per_visitor,
        max_message_chars=settings.max_message_chars,
        max_body_bytes=settings.max_body_bytes,
        reply_wait_seconds=settings.reply_wait_seconds,
        signing_keys=partial(keys_from, settings.secret_key, settings.data_dir),
    )


def _required(value: T | None, name: str) -> T:
    # `Settings` refuses these unset beside the token; this only narrows the type.
    if value is None:
        raise ConfigError(f"PARLEY_{name.upper()} is required with PARLEY_WHATSAPP_TOKEN")
    return value
