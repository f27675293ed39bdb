"""All configuration, read once from `PARLEY_*` environment variables (and `.env`).

The app factory builds one `Settings` and passes it down; nothing reads the
environment anywhere else.
"""

from __future__ import annotations

import json
import re
import zoneinfo
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gateway.errors import ConfigError

_PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "secret", "password", "token", "xxx"})
_TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


class LLMProviderName(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    OFFLINE = "offline"


class ModelPrice(BaseModel):
    """What a model's tokens cost, in US dollars per million (PARLEY_LLM_PRICES)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: Decimal = Field(ge=0)
    # Prompt tokens read from the server's cache (unset: the prompt price).
    cached: Decimal | None = Field(default=None, ge=0)
    completion: Decimal = Field(ge=0)


class FallbackModel(BaseModel):
    """A model tried when the ones before it failed (PARLEY_LLM_FALLBACKS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal[LLMProviderName.OPENAI, LLMProviderName.ANTHROPIC]
    model: str = Field(min_length=1, max_length=200)
    base_url: str | None = Field(default=None, pattern=r"^https?://")
    api_key: SecretStr | None = None

    @model_validator(mode="after")
    def _anthropic_key(self) -> FallbackModel:
        if self.provider is LLMProviderName.ANTHROPIC and self.api_key is None:
            raise ValueError("an anthropic model needs api_key")
        return self

    @property
    def resolved_base_url(self) -> str:
        return (self.base_url or _DEFAULT_BASE_URLS[self.provider]).rstrip("/")


class Policy(StrEnum):
    OPEN = "open"
    ALLOWLIST = "allowlist"
    PAIRING = "pairing"


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class LogFormat(StrEnum):
    AUTO = "auto"  # readable lines on a terminal, JSON otherwise
    CONSOLE = "console"
    JSON = "json"


class UncertainParts(StrEnum):
    """What to do with a reply part whose send was cut short by a crash."""

    RESEND = "resend"  # at least once: the person may see it twice
    SKIP = "skip"  # at most once: the person may miss it


class TelegramMode(StrEnum):
    WEBHOOK = "webhook"
    POLLING = "polling"


_DEFAULT_BASE_URLS = {
    LLMProviderName.OPENAI: "https://api.openai.com/v1",
    LLMProviderName.ANTHROPIC: "https://api.anthropic.com",
}

CommaList = Annotated[tuple[str, ...], NoDecode]
# scheme://host[:port], no path: what a browser sends as Origin.
_TEMPLATE = re.compile(r"^[a-z0-9_]{1,512}:[a-z]{2,3}(_[A-Z]{2})?$")
_QUIET_HOURS = re.compile(r"^([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-3]):[0-5]\d$")
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")
CommaFloats = Annotated[tuple[float, ...], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PARLEY_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        # Each field's docstring is its description: `parley` settings reference.
        use_attribute_docstrings=True,
    )

    data_dir: Path = Path("./data")
    """Parley's own files: the SQLite database, the signing key, the admin token, transcripts
    and the terminal chat's token (0700, its owner's only)."""
    log_level: LogLevel = LogLevel.INFO
    """`debug`, `info`, `warning` or `error`: one JSON line per event (readable lines on a
    terminal), for Parley and every library alike; one `request` line per HTTP request or socket
    with method, path (no query; the token of an `/export` link shown as `[redacted]`), status,
    ms and `request_id` (a client's `X-Request-ID`, else a new one, sent back in the answer);
    never message text, at any level: libraries that would write secrets or what people said at
    `debug` (httpx, aiohttp, python-telegram-bot, discord.py, aiosqlite, asyncpg, SQLAlchemy, websockets,
    uvicorn's socket frames) are held at `info` or `warning` whatever this says."""
    log_format: LogFormat = LogFormat.AUTO
    """`console` (readable lines, the access line's fields as `key=value`), `json` (one object a
    line, for a log collector), or `auto`: readable on a terminal, JSON otherwise."""
    database_url: str | None = None
    """`sqlite:///path.db` or `postgresql://user@host/db`."""
    redis_url: str | None = None
    """Redis, for many replicas: the job queue `parley worker` runs, events between replicas,
    and the platforms' pacing and the web chat's rate limits for the deployment as a whole;
    unset → jobs run inside `parley serve`, and everything else is per process."""
    host: str = "127.0.0.1"
    """The address the HTTP server listens on (`0.0.0.0` for every interface, as in a container)."""
    port: int = Field(default=8080, ge=1, le=65535)
    """The port the HTTP server listens on."""
    public_url: str | None = None
    """The gateway's public URL (for platform webhooks, and the links `/export` answers with
    outside the web chat)."""
    forwarded_allow_ips: str = "127.0.0.1,::1"
    """Proxies whose `X-Forwarded-For` gives the client address (`*`: any)."""
    admin_token: SecretStr | None = None
    """Bearer token of the REST API and the dashboard (16+ characters); unset → `parley serve`
    makes one and keeps it in `PARLEY_DATA_DIR/admin_token` (0600; set it yourself when several
    replicas serve)."""
    secret_key: SecretStr | None = None
    """Signs web chat tokens, API cursors and the dashboard's CSRF tokens; required with Postgres,
    the same on every replica. Several keys, comma-separated: the first signs, each verifies —
    to rotate, put the new key first, and drop the old one once what it signed may end (visitors
    it signed in then sign in again)."""
    persona_file: Path | None = None
    """A Markdown file that opens every system prompt."""
    default_timezone: str = "UTC"
    """IANA time zone for new people."""
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    """Larger request bodies get 413."""
    max_message_chars: int = Field(default=16_000, ge=1)
    """Longer messages get 422."""
    reply_wait_seconds: float = Field(default=300.0, gt=0)
    """How long `POST /webchat/messages` waits for the reply before answering 202."""
    # A request's headers, and then its body, must arrive within this (slow clients
    # would otherwise hold connections open for as long as they like).
    media_max_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    """The largest file a person may send (a web chat upload); larger ones are refused with
    a clear answer."""
    transcribe_base_url: str | None = None
    """Where voice notes and audio are transcribed: an OpenAI-compatible base including
    `/v1` (`POST …/audio/transcriptions`); unset: the model's base URL where
    `PARLEY_LLM_PROVIDER` is `openai`, else none (voice notes are kept, not transcribed)."""
    transcribe_model: str = "whisper-1"
    """Speech-to-text model."""
    transcribe_api_key: SecretStr | None = None
    """Key for the transcription server; unset: `PARLEY_LLM_API_KEY` where the model's
    base URL is used."""
    media_wait_seconds: float = Field(default=20.0, ge=0, le=300)
    """How long a turn waits for the files of its messages (a photo, a voice note) to be
    fetched from their platform before it answers with what it has."""
    read_timeout_seconds: float = Field(default=15.0, gt=0)
    """A request's headers, then its body, must arrive within this; else the connection is closed
    (body: 408)."""
    upload_timeout_seconds: float = Field(default=120.0, gt=0)
    """A file uploaded (web chat) must arrive whole within this (408 past it): 20 MB over
    a slow phone line takes longer than any other body."""
    websocket_ping_seconds: float = Field(default=30.0, ge=5, le=300)
    """How often an open web chat socket is pinged. A peer that does not answer within 20 s
    is closed, and the traffic keeps a proxy's idle timeout (60 s on nginx and on AWS load
    balancers) from closing a quiet socket; each ping costs CPU, in proportion to the
    sockets held."""
    # How long stopping may take: running turns finish, then pending replies go out;
    # what is left then is taken up again on the next start. Open connections get as
    # long again to close before they are cut (they normally close at once).
    shutdown_seconds: float = Field(default=10.0, ge=0)
    """One budget for stopping: running turns finish, then pending replies go out; the rest is
    taken up on the next start."""
    # Web chat abuse limits: new visitors per client address, messages per visitor
    # (HTTP and WebSocket together), open sockets per visitor.
    webchat_sessions_per_minute: int = Field(default=20, ge=1)
    """New web chat visitors (and sign-ins) per client address (429 past it)."""
    webchat_messages_per_minute: int = Field(default=30, ge=1)
    """Messages per visitor, HTTP and WebSocket together (429 past it)."""
    webchat_uploads_per_minute: int = Field(default=10, ge=1)
    """Files one visitor may upload a minute (429 past it)."""
    webchat_sockets_per_visitor: int = Field(default=5, ge=1)
    """Open WebSockets per visitor; one more is closed with code 4429."""
    # Signs the identity tokens a site gives the widget for its logged-in user (HS256);
    # unset: only anonymous visitors.
    webchat_identity_secret: SecretStr | None = None
    """HS256 key (32+ bytes) sites sign their users' identity tokens with; unset: anonymous
    visitors only."""
    # Origins whose pages may call the web chat API (CORS), open its socket and frame
    # it; unset: only Parley's own.
    webchat_allowed_origins: CommaList = ()
    """Comma-separated origins (`https://shop.example`) whose pages may call `/webchat/...` (CORS),
    open its socket and frame the widget; unset: Parley's own origin only. The operator API
    never answers other origins."""

    llm_provider: LLMProviderName = LLMProviderName.OFFLINE
    """`openai` (any compatible server), `anthropic` or `offline`."""
    llm_base_url: str | None = None
    """`openai`: the base including `/v1`; `anthropic`: the root."""
    llm_api_key: SecretStr | None = None
    """Required for `anthropic`."""
    llm_model: str = "gpt-4o-mini"
    """Chat model."""
    llm_vision: Literal["auto", "true", "false"] = "auto"
    """Whether the model is shown images as themselves: `auto` (on for `openai` and
    `anthropic`), `true` or `false` (told of them in words only)."""
    media_images_in_prompt: int = Field(default=4, ge=0, le=20)
    """How many of the live window's newest images a model that sees is shown; older
    ones are told of in words."""
    summary_model: str | None = None
    """Model for archive summaries."""
    llm_timeout_seconds: float = Field(default=60.0, gt=0)
    """Read timeout per model call."""
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    """Retries on 429/5xx/timeouts, before any text arrived."""
    llm_retry_base_seconds: float = Field(default=1.0, ge=0)
    """Exponential backoff base (a `Retry-After` header wins)."""
    llm_context_tokens: int = Field(default=128_000, ge=2_048)
    """The model's context window; the prompt never exceeds it minus the reply."""
    llm_max_reply_tokens: int = Field(default=2_048, ge=64)
    """Reply length asked for and reserved."""
    # Recall tool calls one turn may make (0: the model gets no tools).
    llm_max_tool_calls: int = Field(default=6, ge=0, le=50)
    """Recall tool calls one turn may make (0: no tools)."""
    llm_fallbacks: Annotated[tuple[FallbackModel, ...], NoDecode] = ()
    """Models asked in order when the main one fails after its retries (an error, a time-out,
    5xx, 429, an overloaded answer), for turns and background work alike: a JSON list of
    `{"provider": "openai" | "anthropic", "model", "base_url", "api_key"}` (`base_url`
    defaults to the provider's own; Anthropic needs `api_key`). A reply is never two models'
    words: what a failing model showed is withdrawn before the next one writes."""

    llm_prices: dict[str, ModelPrice] = {}
    """What each model costs, to report usage as money: JSON
    `{"<model>": {"prompt": USD, "cached": USD, "completion": USD}}`, each per million tokens
    (`cached` defaults to the prompt price). A model with no price is reported with a cost
    of `null`."""
    daily_tokens_per_person: int | None = Field(default=None, ge=0)
    """Tokens (prompt and completion) one person's turns may take a day, midnight to
    midnight in their zone. Past it they are told once, their messages are still stored, and
    the model is not asked until the next day. Unset: no limit. An operator can set a
    person's own (`PATCH /api/v1/users/{id}`)."""
    daily_tokens_per_group: int | None = Field(default=None, ge=0)
    """The same for each group (days in UTC). A group's turns count against no member's own
    limit. Unset: no limit."""

    # Memory (DESIGN §4). Sizes are for a 128k-token model and shrink in proportion
    # on a smaller PARLEY_LLM_CONTEXT_TOKENS.
    live_window_tokens: int = Field(default=20_000, ge=1_000)
    """Live messages past this are archived."""
    chunk_tokens: int = Field(default=10_000, ge=5_000)
    """How many tokens of the oldest live messages are cut into one archived chunk."""
    chunk_min_tokens: int = Field(default=5_000, ge=100)
    """The least that is worth cutting into a chunk: a shorter run of old messages waits."""
    summary_tokens: int = Field(default=1_500, ge=100)
    """Length of each summary."""
    summary_window_tokens: int | None = Field(default=None, ge=1_000)
    """Most text one summarising call reads; longer goes in parts."""
    consolidate_at: int = Field(default=6, ge=2)
    """Level-0 summaries ready before the oldest are consolidated into one of level 1."""
    consolidate_count: int = Field(default=4, ge=2)
    """How many of the oldest level-0 summaries one consolidation takes."""
    rollup_keep: int = Field(default=5, ge=1)
    """Summaries of a higher level kept as they are (the newest) before older ones roll up."""
    rollup_batch: int = Field(default=5, ge=2)
    """How many summaries of a higher level roll up into one of the level above."""
    archive_notify_after: int = Field(default=3, ge=1)
    """Failed attempts before the person is told (once)."""
    archive_retry_base_seconds: float = Field(default=30.0, ge=0)
    """Summary retry backoff."""
    archive_retry_max_seconds: float = Field(default=3_600.0, ge=0)
    """The longest wait between two tries of a failed archive job (the waits double up to it)."""
    job_lease_seconds: float = Field(default=30.0, ge=1)
    """A killed worker's chunk is taken over after this."""
    # `parley worker` serves a /metrics of its own on this port (on PARLEY_HOST): the
    # tokens of the model calls its summaries and extractions make. Unset: it serves none.
    worker_metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """`parley worker` serves its own `/metrics` here (model tokens of its jobs)."""
    # A replica's hold on a conversation while it answers: renewed every third of it; a
    # dead replica's conversations pass to another within it (plus one sweep).
    turn_lease_seconds: float = Field(default=30.0, ge=3)
    """A dead replica's conversations, chats and singletons pass to another after this."""
    # Turns of a replica doing the gateway's own work at once (a turn waiting on the
    # model lends its slot); the rest wait in the order they asked, their messages
    # stored. Bounded so that a burst is acknowledged at once, its turns catching up.
    turn_concurrency: int = Field(default=2, ge=1)
    """Turns one replica works on at once: reading memory, writing the prompt, storing and handing
    over the reply (a turn waiting on the model lends its slot, so a slow model holds up no
    one). The rest wait in the order they asked, their messages stored and acknowledged at once;
    waiting ones show in `parley_turns_waiting`. While platform messages keep arriving, turns
    wait for a pause (up to 2 s) so acknowledgements never queue behind them."""
    sweep_interval_seconds: float = Field(default=10.0, gt=0)
    """How often due work is re-queued from the database (embedded runner), and owed turns and
    pending replies are taken over."""
    # Reminders and follow-ups (DESIGN §9): how often due ones are looked for; how late
    # one may fire and still count as on time (later: once, saying it is late); when
    # follow-ups wait (in each person's zone, HH:MM-HH:MM; empty: never) and how many a
    # person gets a day (0: the assistant makes none).
    reminder_sweep_seconds: float = Field(default=5.0, gt=0)
    """How often due reminders are looked for (one replica at a time; one indexed query when
    nothing is due)."""
    reminder_grace_minutes: int = Field(default=60, ge=0)
    """A reminder fired later than this after its due time (the gateway was down) says it is late
    and when it was due."""
    quiet_hours: str = "22:00-08:00"
    """When the assistant's own follow-ups wait, in each person's zone (`HH:MM-HH:MM`, may wrap
    midnight; empty: never); reminders a person asked for ignore them."""
    follow_ups_per_day: int = Field(default=2, ge=0)
    """Follow-ups a person gets per local day at most (one past it is skipped, and kept as
    skipped); `0`: the assistant makes none."""
    # The least time between two previews of one reply being written (DESIGN §10); a
    # platform's own limits may space edited previews further (Telegram groups: 3 s).
    stream_interval_ms: int = Field(default=750, ge=100, le=60_000)
    """The least time between two previews of one reply being written (Telegram private chats'
    drafts; edited previews, which a platform's limits may space further)."""
    # Telegram groups and Discord: show a reply as it is written in one message, edited
    # as it grows (off: the typing indicator only).
    telegram_stream_edits: bool = False
    """Show a reply as it is written in Telegram groups, in one message edited at most every 3 s
    (off: "typing…" only). Private chats show drafts either way."""
    discord_stream_edits: bool = False
    """Show a reply as it is written on Discord, in one message edited as it grows (off: "typing…"
    only)."""
    embedded_job_concurrency: int = Field(default=2, ge=1)
    """Jobs at once in the embedded runner (twice that per arq worker)."""
    profile_tidy_at_chars: int = Field(default=40_000, ge=1_000)
    """Tidy the profile past this, toward that."""
    profile_tidy_target_chars: int = Field(default=30_000, ge=500)
    """How short a tidy pass aims to make a profile that outgrew `PARLEY_PROFILE_TIDY_AT_CHARS`."""
    profile_tidy_regrow_chars: int = Field(default=4_000, ge=100)
    """After a tidy that could not shrink, grow this much before the next."""
    profile_tidy_max_passes: int = Field(default=2, ge=1, le=5)
    """Model passes per tidy."""
    profile_tidy_backoff_seconds: CommaFloats = (3_600.0, 21_600.0, 86_400.0)
    """Waits after consecutive failed tidies (the last repeats)."""

    telegram_token: SecretStr | None = None
    """The bot token from @BotFather; Telegram is on when it is set."""
    telegram_webhook_secret: SecretStr | None = None
    """The secret Telegram sends with every webhook post (1–256 of `A-Za-z0-9_-`); required in
    webhook mode."""
    telegram_api_url: str = "https://api.telegram.org"
    """The Bot API's root, for a local Bot API server, a proxy or a test fake."""
    telegram_mode: TelegramMode = TelegramMode.WEBHOOK
    """`webhook` (Telegram posts to `{PARLEY_PUBLIC_URL}/webhooks/telegram`) or `polling` (one
    replica asks Telegram, for a machine without a public address)."""
    discord_token: SecretStr | None = None
    """The bot token from the Discord developer portal; Discord is on when it is set."""
    discord_api_url: str = "https://discord.com/api/v10"
    """Discord's REST root, with the API version, for a proxy or a test fake."""
    discord_gateway_url: str = "wss://gateway.discord.gg/"
    """The first gateway (websocket) URL, for a proxy or a test fake."""
    # After a reconnect, messages missed in each chat read within this many hours are
    # fetched from the chat's history (at most this many a chat, the newest).
    discord_backfill_hours: float = Field(default=24.0, gt=0)
    """After a reconnect, chats active within this many hours have what they said meanwhile read
    back."""
    discord_backfill_messages: int = Field(default=100, ge=1, le=1000)
    """After a reconnect, at most this many missed messages of each chat are read back (the
    newest)."""
    whatsapp_token: SecretStr | None = None
    """The Cloud API access token (a system user's); WhatsApp is on when it is set, and the app
    secret, verify token and phone number id are then required."""
    whatsapp_app_secret: SecretStr | None = None
    """The Meta app's secret: every notification must be signed with it (`X-Hub-Signature-256`)."""
    whatsapp_verify_token: SecretStr | None = None
    """The verify token entered in the Meta app's webhook settings, answered when Meta verifies the
    webhook."""
    whatsapp_phone_number_id: str | None = None
    """The id of the business phone number replies go out from (not the number itself)."""
    whatsapp_api_url: str = "https://graph.facebook.com/v21.0"
    """The Graph API's root, with its version, for a proxy or a test fake."""
    # An approved template (`name:language`, e.g. `reminder:en`) whose body has one
    # parameter: how a reminder reaches a person outside WhatsApp's 24-hour window.
    whatsapp_reminder_template: str | None = None
    """An approved template `name:language` (e.g. `reminder:en`) whose body has one parameter: a
    reminder past WhatsApp's 24-hour window goes out as it."""

    telegram_policy: Policy = Policy.PAIRING
    """Who may talk to the bot on Telegram: `open` (anyone), `pairing` (an operator approves each
    person's code) or `allowlist`."""
    discord_policy: Policy = Policy.PAIRING
    """Who may talk to the bot on Discord: `open`, `pairing` or `allowlist`."""
    whatsapp_policy: Policy = Policy.PAIRING
    """Who may talk to the bot on WhatsApp: `open`, `pairing` or `allowlist`."""
    webchat_policy: Policy = Policy.OPEN
    """Who may talk on the web chat: `open` (anyone with the page), `pairing` or `allowlist`."""
    telegram_allowlist: CommaList = ()
    """Comma-separated Telegram user ids: the only ones let in under the `allowlist` policy, let in
    without a code under `pairing`."""
    discord_allowlist: CommaList = ()
    """Comma-separated Discord user ids: the only ones let in under the `allowlist` policy, let in
    without a code under `pairing`."""
    whatsapp_allowlist: CommaList = ()
    """Comma-separated WhatsApp numbers (digits, as WhatsApp sends them): the only ones let in
    under the `allowlist` policy, let in without a code under `pairing`."""
    webchat_allowlist: CommaList = ()
    """Comma-separated web chat visitor ids (`site:<sub>` for a site's identified users): the only
    ones let in under the `allowlist` policy, let in without a code under `pairing`."""

    # -- pairing and delivery (connectors) --
    pairing_code_ttl_seconds: int = Field(default=3_600, ge=60)
    """How long a pairing code stays valid."""
    # Codes waiting for an operator, per channel; past this, new people are turned away.
    pairing_max_pending: int = Field(default=10, ge=1)
    """Codes waiting per channel; past this, new people are asked to try later."""
    # Sending a reply: tries before it is marked failed, and the backoff between them
    # (a platform's retry_after wins).
    delivery_max_attempts: int = Field(default=8, ge=1, le=100)
    """Tries to send a reply before it is marked failed with the platform's reason."""
    delivery_retry_base_seconds: float = Field(default=2.0, ge=0)
    """Delivery backoff (a platform's `retry_after` wins)."""
    delivery_retry_max_seconds: float = Field(default=300.0, gt=0)
    """The longest wait between two tries of a reply part the platform did not take (the waits
    double up to it; a platform's own `retry_after` wins)."""
    delivery_uncertain: UncertainParts = UncertainParts.RESEND
    """A reply part a crash left in doubt: `resend` (at least once) or `skip` (at most once)."""

    @field_validator("telegram_webhook_secret")
    @classmethod
    def _telegram_secret_alphabet(cls, value: SecretStr | None) -> SecretStr | None:
        # Telegram accepts 1-256 characters of A-Z, a-z, 0-9, _ and - only.
        if value is not None and not _TELEGRAM_SECRET.fullmatch(value.get_secret_value()):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
        return value

    @model_validator(mode="after")
    def _connector_credentials(self) -> Settings:
        if (
            self.telegram_token is not None
            and self.telegram_mode is TelegramMode.WEBHOOK
            and self.telegram_webhook_secret is None
        ):
            raise ValueError(
                "PARLEY_TELEGRAM_WEBHOOK_SECRET is required for the Telegram webhook "
                "(or set PARLEY_TELEGRAM_MODE=polling)"
            )
        if self.whatsapp_token is not None:
            for name in (
                "whatsapp_app_secret",
                "whatsapp_verify_token",
                "whatsapp_phone_number_id",
            ):
                if getattr(self, name) is None:
                    raise ValueError(
                        f"PARLEY_{name.upper()} is required with PARLEY_WHATSAPP_TOKEN"
                    )
        return self

    @field_validator(
        "telegram_allowlist",
        "discord_allowlist",
        "whatsapp_allowlist",
        "webchat_allowlist",
        "profile_tidy_backoff_seconds",
        mode="before",
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        # Also used for PARLEY_PROFILE_TIDY_BACKOFF_SECONDS; pydantic then checks floats.
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("default_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA time zone {value!r}") from exc
        return value

    @field_validator("whatsapp_reminder_template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None and not _TEMPLATE.match(value):
            raise ValueError(
                f"a template is NAME:LANGUAGE (e.g. reminder:en or reminder:pt_BR), not {value!r}"
            )
        return value

    @field_validator("quiet_hours")
    @classmethod
    def _quiet_hours(cls, value: str) -> str:
        if value.strip() and not _QUIET_HOURS.match(value.strip()):
            raise ValueError(f"quiet hours are HH:MM-HH:MM (e.g. 22:00-08:00), not {value!r}")
        return value.strip()

    @field_validator("llm_fallbacks", mode="before")
    @classmethod
    def _fallbacks_json(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if not value.strip():
            return ()
        try:
            parsed = json.loads(value)
        except ValueError:
            raise ValueError("must be a JSON list of models") from None
        if not isinstance(parsed, list):
            raise ValueError("must be a JSON list of models")
        return parsed

    @field_validator("webchat_allowed_origins", mode="before")
    @classmethod
    def _origins(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        origins = tuple(part.strip().rstrip("/") for part in value.split(",") if part.strip())
        for origin in origins:
            if not _ORIGIN.fullmatch(origin):
                raise ValueError(f"{origin!r} is not an origin like https://shop.example")
        return origins

    @field_validator("webchat_identity_secret")
    @classmethod
    def _hs256_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().encode()) < 32:
            raise ValueError("must be at least 32 bytes: it is an HS256 key")
        return value

    @field_validator("admin_token", "secret_key", "webchat_identity_secret")
    @classmethod
    def _no_placeholder(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is None:
            return None
        secret = value.get_secret_value()
        keys = secret.split(",") if info.field_name == "secret_key" else [secret]
        for key in keys:
            if key.strip().lower() in _PLACEHOLDER_SECRETS or len(key.strip()) < 16:
                raise ValueError("must be a real secret of at least 16 characters (each key)")
        return value

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.startswith(("postgres://", "postgresql://")):
            return "postgresql+asyncpg://" + value.split("://", 1)[1]
        if value.startswith("sqlite://"):
            return "sqlite+aiosqlite://" + value.split("://", 1)[1]
        if not value.startswith(("postgresql+asyncpg://", "sqlite+aiosqlite://")):
            raise ValueError("must be a sqlite:// or postgresql:// URL")
        return value

    @model_validator(mode="after")
    def _chunk_sizes(self) -> Settings:
        if self.chunk_min_tokens > self.chunk_tokens:
            raise ValueError("PARLEY_CHUNK_MIN_TOKENS must not exceed PARLEY_CHUNK_TOKENS")
        if self.chunk_tokens >= self.live_window_tokens:
            raise ValueError("PARLEY_CHUNK_TOKENS must be below PARLEY_LIVE_WINDOW_TOKENS")
        if self.profile_tidy_target_chars >= self.profile_tidy_at_chars:
            raise ValueError(
                "PARLEY_PROFILE_TIDY_TARGET_CHARS must be below PARLEY_PROFILE_TIDY_AT_CHARS"
            )
        if not self.profile_tidy_backoff_seconds:
            raise ValueError("PARLEY_PROFILE_TIDY_BACKOFF_SECONDS needs at least one wait")
        if self.consolidate_count >= self.consolidate_at:
            raise ValueError("PARLEY_CONSOLIDATE_COUNT must be below PARLEY_CONSOLIDATE_AT")
        return self

    @model_validator(mode="after")
    def _llm_credentials(self) -> Settings:
        if self.llm_provider is LLMProviderName.ANTHROPIC and self.llm_api_key is None:
            raise ValueError("PARLEY_LLM_API_KEY is required for the anthropic provider")
        return self

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'parley.db').resolve()}"

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def sees_images(self) -> bool:
        """Whether the configured model is shown images (PARLEY_LLM_VISION)."""
        return self.llm_vision != "false" and self.llm_provider is not LLMProviderName.OFFLINE

    @property
    def transcriber(self) -> tuple[str, SecretStr | None] | None:
        """Where voice notes are transcribed, and with what key; None: nowhere."""
        if self.transcribe_base_url:
            return self.transcribe_base_url, self.transcribe_api_key
        if self.llm_provider is LLMProviderName.OPENAI:
            return self.resolved_llm_base_url, self.transcribe_api_key or self.llm_api_key
        return None

    @property
    def resolved_llm_base_url(self) -> str:
        base = self.llm_base_url or _DEFAULT_BASE_URLS.get(self.llm_provider, "")
        return base.rstrip("/")


def load_settings(**overrides: object) -> Settings:
    """Build settings, turning a validation failure into one line per bad setting."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        if error["loc"]:
            name, *inside = error["loc"]
            # Where in a structured setting (an entry of a list, its field): never its value.
            where = ", ".join(f"entry {p}" if isinstance(p, int) else str(p) for p in inside)
            place = f" ({where})" if where else ""
            lines.append(f"invalid setting PARLEY_{str(name).upper()}{place}: {message}")
        else:  # a rule across settings; the message names them
            lines.append(f"invalid settings: {message}")
    return "\n".join(lines)
