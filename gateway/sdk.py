"""Everything a connector may use of the gateway, and the only module it imports.

A connector's whole view of the gateway is `__all__` below: the roles the core plays
for it (it declares the ones it uses by the type its `start` takes), what it
implements (`Connector`, `Capabilities`, `Pace`), the neutral messages, the errors it
raises or catches, its own settings, and the few helpers every platform needs
(backoff, JSON that platforms send, UTF-16 lengths, the web chat's wire and HTTP
pieces). An import-linter contract forbids connectors every other gateway module, so
changing what is listed here is the one way to widen what a connector can reach.

Named `sdk` for what it is to a connector's author: the kit a channel is written
against. It sits above every module it re-exports, and nothing in the gateway imports
it.

`CoreRoles` (all roles at once) is left out on purpose: a connector names the roles
it uses, never the whole core.
"""

from __future__ import annotations

from gateway.backoff import full_jitter, parse_retry_after, server_wait
from gateway.calls_out import client_session, env_proxy
from gateway.channels.connector_settings import (
    DiscordSettings,
    TelegramSettings,
    WebchatSettings,
    WhatsAppSettings,
)
from gateway.channels.port import (
    NO_SOCKETS,
    Capabilities,
    Clocked,
    Connector,
    Delivery,
    Finding,
    GroupMoves,
    History,
    Identities,
    IdentityRef,
    Limits,
    LiveEvents,
    Pace,
    Place,
    Receipts,
    Received,
    Receiving,
    Singleton,
    Singletons,
    StoredMessage,
    Uploaded,
    Uploading,
    Watermarks,
)
from gateway.channels.split import close_fences, split_text, utf16_length
from gateway.envelopes import ChatRef, Inbound, InboundFile, Outbound
from gateway.errors import (
    AccessRefused,
    AuthError,
    ConfigError,
    ConversationEnded,
    DeliveryError,
    FileUnavailable,
    InputError,
    LeftUnanswered,
    MediaRefused,
    RateLimited,
    SignInExpired,
    Undeliverable,
)
from gateway.events.hub import (
    QUEUE_LIMIT,
    DeltaEvent,
    Ended,
    Event,
    MessageEvent,
    Overflow,
    Stored,
    Typing,
)
from gateway.http.assets import GET_AND_HEAD, Asset
from gateway.http.body_limit import UPLOADS_PATH
from gateway.http.errors import validation_errors
from gateway.http.slots import Slots
from gateway.http.wire import MessageOut, file_response
from gateway.media.downloads import LinkGone, read_at_most
from gateway.replicas.rate_limits import RateLimit
from gateway.settings import TelegramMode
from gateway.tasks import finish_or_cancel
from gateway.text import (
    MAX_INT64,
    NAME_CHARS,
    MalformedJSON,
    StorableText,
    clean,
    load_platform_json,
)

__all__ = [
    "GET_AND_HEAD",
    "MAX_INT64",
    "NAME_CHARS",
    "NO_SOCKETS",
    "QUEUE_LIMIT",
    "UPLOADS_PATH",
    "AccessRefused",
    "Asset",
    "AuthError",
    "Capabilities",
    "ChatRef",
    "Clocked",
    "ConfigError",
    "Connector",
    "ConversationEnded",
    "Delivery",
    "DeliveryError",
    "DeltaEvent",
    "DiscordSettings",
    "Ended",
    "Event",
    "FileUnavailable",
    "Finding",
    "GroupMoves",
    "History",
    "Identities",
    "IdentityRef",
    "Inbound",
    "InboundFile",
    "InputError",
    "LeftUnanswered",
    "Limits",
    "LinkGone",
    "LiveEvents",
    "MalformedJSON",
    "MediaRefused",
    "MessageEvent",
    "MessageOut",
    "Outbound",
    "Overflow",
    "Pace",
    "Place",
    "RateLimit",
    "RateLimited",
    "Receipts",
    "Received",
    "Receiving",
    "SignInExpired",
    "Singleton",
    "Singletons",
    "Slots",
    "StorableText",
    "Stored",
    "StoredMessage",
    "TelegramMode",
    "TelegramSettings",
    "Typing",
    "Undeliverable",
    "Uploaded",
    "Uploading",
    "Watermarks",
    "WebchatSettings",
    "WhatsAppSettings",
    "clean",
    "client_session",
    "close_fences",
    "env_proxy",
    "file_response",
    "finish_or_cancel",
    "full_jitter",
    "load_platform_json",
    "parse_retry_after",
    "read_at_most",
    "server_wait",
    "split_text",
    "utf16_length",
    "validation_errors",
]
