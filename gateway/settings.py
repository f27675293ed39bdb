"""All configuration, read once from `PARLEY_*` environment variables (and `.env`).

The app factory builds one `Settings` and passes it down; nothing reads the
environment anywhere else.
"""

from __future__ import annotations

import re
import zoneinfo
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gateway.errors import ConfigError

_PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "secret", "password", "token", "xxx"})
_TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


class LLMProviderName(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    OFFLINE = "offline"


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
    )

    data_dir: Path = Path("./data")
    log_level: LogLevel = LogLevel.INFO
    log_format: LogFormat = LogFormat.AUTO
    database_url: str | None = None
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    public_url: str | None = None
    # Proxies whose X-Forwarded-For is believed (the client address rate limits count by).
    forwarded_allow_ips: str = "127.0.0.1,::1"
    admin_token: SecretStr | None = None
    # Signs web chat tokens. Unset: a random key is created once in the data dir.
    secret_key: SecretStr | None = None
    persona_file: Path | None = None
    default_timezone: str = "UTC"
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    max_message_chars: int = Field(default=16_000, ge=1)
    reply_wait_seconds: float = Field(default=300.0, gt=0)
    # A request's headers, and then its body, must arrive within this (slow clients
    # would otherwise hold connections open for as long as they like).
    read_timeout_seconds: float = Field(default=15.0, gt=0)
    # How long stopping may take: running turns finish, then pending replies go out;
    # what is left then is taken up again on the next start. Open connections get as
    # long again to close before they are cut (they normally close at once).
    shutdown_seconds: float = Field(default=10.0, ge=0)
    # Web chat abuse limits: new visitors per client address, messages per visitor
    # (HTTP and WebSocket together), open sockets per visitor.
    webchat_sessions_per_minute: int = Field(default=20, ge=1)
    webchat_messages_per_minute: int = Field(default=30, ge=1)
    webchat_sockets_per_visitor: int = Field(default=5, ge=1)
    # Signs the identity tokens a site gives the widget for its logged-in user (HS256);
    # unset: only anonymous visitors.
    webchat_identity_secret: SecretStr | None = None
    # Origins whose pages may call the web chat API (CORS), open its socket and frame
    # it; unset: only Parley's own.
    webchat_allowed_origins: CommaList = ()

    llm_provider: LLMProviderName = LLMProviderName.OFFLINE
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model: str = "gpt-4o-mini"
    summary_model: str | None = None
    llm_timeout_seconds: float = Field(default=60.0, gt=0)
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    llm_retry_base_seconds: float = Field(default=1.0, ge=0)
    llm_context_tokens: int = Field(default=128_000, ge=2_048)
    llm_max_reply_tokens: int = Field(default=2_048, ge=64)
    # Recall tool calls one turn may make (0: the model gets no tools).
    llm_max_tool_calls: int = Field(default=6, ge=0, le=50)

    # Memory (DESIGN §4). Sizes are for a 128k-token model and shrink in proportion
    # on a smaller PARLEY_LLM_CONTEXT_TOKENS.
    live_window_tokens: int = Field(default=20_000, ge=1_000)
    chunk_tokens: int = Field(default=10_000, ge=5_000)
    chunk_min_tokens: int = Field(default=5_000, ge=100)
    summary_tokens: int = Field(default=1_500, ge=100)
    summary_window_tokens: int | None = Field(default=None, ge=1_000)
    consolidate_at: int = Field(default=6, ge=2)
    consolidate_count: int = Field(default=4, ge=2)
    rollup_keep: int = Field(default=5, ge=1)
    rollup_batch: int = Field(default=5, ge=2)
    archive_notify_after: int = Field(default=3, ge=1)
    archive_retry_base_seconds: float = Field(default=30.0, ge=0)
    archive_retry_max_seconds: float = Field(default=3_600.0, ge=0)
    job_lease_seconds: float = Field(default=30.0, ge=1)
    # `parley worker` serves a /metrics of its own on this port (on PARLEY_HOST): the
    # tokens of the model calls its summaries and extractions make. Unset: it serves none.
    worker_metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # A replica's hold on a conversation while it answers: renewed every third of it; a
    # dead replica's conversations pass to another within it (plus one sweep).
    turn_lease_seconds: float = Field(default=30.0, ge=3)
    # Turns of a replica doing the gateway's own work at once (a turn waiting on the
    # model lends its slot); the rest wait in the order they asked, their messages
    # stored. Bounded so that a burst is acknowledged at once, its turns catching up.
    turn_concurrency: int = Field(default=2, ge=1)
    sweep_interval_seconds: float = Field(default=10.0, gt=0)
    # Reminders and follow-ups (DESIGN §9): how often due ones are looked for; how late
    # one may fire and still count as on time (later: once, saying it is late); when
    # follow-ups wait (in each person's zone, HH:MM-HH:MM; empty: never) and how many a
    # person gets a day (0: the assistant makes none).
    reminder_sweep_seconds: float = Field(default=5.0, gt=0)
    reminder_grace_minutes: int = Field(default=60, ge=0)
    quiet_hours: str = "22:00-08:00"
    follow_ups_per_day: int = Field(default=2, ge=0)
    # The least time between two previews of one reply being written (DESIGN §10); a
    # platform's own limits may space edited previews further (Telegram groups: 3 s).
    stream_interval_ms: int = Field(default=750, ge=100, le=60_000)
    # Telegram groups and Discord: show a reply as it is written in one message, edited
    # as it grows (off: the typing indicator only).
    telegram_stream_edits: bool = False
    discord_stream_edits: bool = False
    embedded_job_concurrency: int = Field(default=2, ge=1)
    profile_tidy_at_chars: int = Field(default=40_000, ge=1_000)
    profile_tidy_target_chars: int = Field(default=30_000, ge=500)
    profile_tidy_regrow_chars: int = Field(default=4_000, ge=100)
    profile_tidy_max_passes: int = Field(default=2, ge=1, le=5)
    profile_tidy_backoff_seconds: CommaFloats = (3_600.0, 21_600.0, 86_400.0)

    telegram_token: SecretStr | None = None
    telegram_webhook_secret: SecretStr | None = None
    telegram_api_url: str = "https://api.telegram.org"
    telegram_mode: TelegramMode = TelegramMode.WEBHOOK
    discord_token: SecretStr | None = None
    discord_api_url: str = "https://discord.com/api/v10"
    discord_gateway_url: str = "wss://gateway.discord.gg/"
    # After a reconnect, messages missed in each chat read within this many hours are
    # fetched from the chat's history (at most this many a chat, the newest).
    discord_backfill_hours: float = Field(default=24.0, gt=0)
    discord_backfill_messages: int = Field(default=100, ge=1, le=1000)
    whatsapp_token: SecretStr | None = None
    whatsapp_app_secret: SecretStr | None = None
    whatsapp_verify_token: SecretStr | None = None
    whatsapp_phone_number_id: str | None = None
    whatsapp_api_url: str = "https://graph.facebook.com/v21.0"
    # An approved template (`name:language`, e.g. `reminder:en`) whose body has one
    # parameter: how a reminder reaches a person outside WhatsApp's 24-hour window.
    whatsapp_reminder_template: str | None = None

    telegram_policy: Policy = Policy.PAIRING
    discord_policy: Policy = Policy.PAIRING
    whatsapp_policy: Policy = Policy.PAIRING
    webchat_policy: Policy = Policy.OPEN
    telegram_allowlist: CommaList = ()
    discord_allowlist: CommaList = ()
    whatsapp_allowlist: CommaList = ()
    webchat_allowlist: CommaList = ()

    # -- pairing and delivery (connectors) --
    pairing_code_ttl_seconds: int = Field(default=3_600, ge=60)
    # Codes waiting for an operator, per channel; past this, new people are turned away.
    pairing_max_pending: int = Field(default=10, ge=1)
    # Sending a reply: tries before it is marked failed, and the backoff between them
    # (a platform's retry_after wins).
    delivery_max_attempts: int = Field(default=8, ge=1, le=100)
    delivery_retry_base_seconds: float = Field(default=2.0, ge=0)
    delivery_retry_max_seconds: float = Field(default=300.0, gt=0)
    delivery_uncertain: UncertainParts = UncertainParts.RESEND

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
    def _no_placeholder(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        secret = value.get_secret_value()
        if secret.lower() in _PLACEHOLDER_SECRETS or len(secret) < 16:
            raise ValueError("must be a real secret of at least 16 characters")
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
            lines.append(f"invalid setting PARLEY_{str(error['loc'][0]).upper()}: {message}")
        else:  # a rule across settings; the message names them
            lines.append(f"invalid settings: {message}")
    return "\n".join(lines)
