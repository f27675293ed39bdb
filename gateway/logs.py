"""Structured logging: readable on a terminal, JSON lines otherwise, for our own logs and
for every library's (uvicorn, arq, httpx, python-telegram-bot) alike.

Our code logs through structlog; the libraries log through the standard library. Both
end in one handler on the root logger whose formatter runs structlog's processors, so
every line has the same shape, level filter and time stamp. Context bound with
`structlog.contextvars` (the request id) is on every line written while it is bound.

No line carries a secret or what people said, at any level. Libraries that write them
below some level (request URLs with the bot token, Bot API parameters, SQL parameters,
socket frames) are held at that level whatever PARLEY_LOG_LEVEL says; and, as the last
line of defence, the secrets of the settings are cut out of every line written.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Sequence
from urllib.parse import quote, quote_plus, urlsplit

import structlog
from pydantic import SecretStr
from structlog.typing import Processor

from gateway.settings import Settings

REDACTED = "[redacted]"
# Shorter values are not cut out: they would cut words out of every line, and no real
# secret is that short (the settings refuse short admin tokens and keys).
MIN_SECRET_CHARS = 8

# The lowest level at which each library's lines are written: below it they carry
# secrets or what people said.
_CAPPED = {
    # Request URLs (the Bot API's contain the bot token); raw requests at debug.
    "httpx": logging.WARNING,
    "httpcore": logging.WARNING,
    # Debug: connection errors as they are, which may quote a request's URL.
    "aiohttp": logging.INFO,
    # Debug: every Bot API call with its parameters (message text, setWebhook's secret)
    # and the base URL with the token.
    "telegram": logging.INFO,
    # Debug: every gateway event and REST payload, message content included.
    "discord": logging.INFO,
    # Warnings about oddities in the PDFs people send: the sender's business, not ours.
    "pypdf": logging.ERROR,
    # Debug: every statement with its parameters (message text).
    "aiosqlite": logging.INFO,
    "asyncpg": logging.INFO,
    # Info: SQL with its parameters.
    "sqlalchemy.engine": logging.WARNING,
    "sqlalchemy.pool": logging.WARNING,
    # Debug: every socket frame (uvicorn's socket protocol logs as uvicorn.error).
    "websockets": logging.INFO,
    "uvicorn.error": logging.INFO,
    # Replaced by our access line, which carries the request id and no query string.
    "uvicorn.access": logging.CRITICAL + 1,
}


def configure_logging(
    level: str = "info", *, secrets: Iterable[str] = (), log_format: str = "auto"
) -> None:
    """Log at `level` to standard error, as readable lines (`console`) or one JSON
    object a line (`json`; `auto`: readable on a terminal, JSON for a collector);
    `secrets` never appear in a line."""
    numeric = logging.getLevelName(level.upper())
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    readable = log_format == "console" or (log_format == "auto" and sys.stderr.isatty())
    renderer: Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if readable
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _Redacting(
            secrets,
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "arq", "telegram"):
        library = logging.getLogger(name)
        library.handlers = []
        library.propagate = True
    for name, lowest in _CAPPED.items():
        logging.getLogger(name).setLevel(max(lowest, numeric))
    uvicorn = logging.getLogger("uvicorn.error")
    if _SOCKET_QUERY not in uvicorn.filters:
        uvicorn.addFilter(_SOCKET_QUERY)


def secrets_of(settings: Settings) -> list[str]:
    """Every secret the settings hold: tokens, keys, passwords in service URLs."""
    found: list[str] = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            secret = value.get_secret_value()
            # Several signing keys may be given, comma-separated (a rotation).
            keys = [key.strip() for key in secret.split(",")] if name == "secret_key" else []
            found += [secret, *keys]
    found += [f.api_key.get_secret_value() for f in settings.llm_fallbacks if f.api_key]
    for url in (settings.database_url, settings.redis_url):
        password = urlsplit(url).password if url else None
        if password:
            found.append(password)
    return found


class _Redacting(structlog.stdlib.ProcessorFormatter):
    """Renders as structlog does, then cuts each secret out of the line, as written
    plainly, escaped in JSON or a repr, or encoded in a URL."""

    def __init__(
        self,
        secrets: Iterable[str],
        *,
        foreign_pre_chain: Sequence[Processor],
        processors: Sequence[Processor],
    ) -> None:
        super().__init__(foreign_pre_chain=foreign_pre_chain, processors=processors)
        forms = {
            form
            for secret in secrets
            if len(secret) >= MIN_SECRET_CHARS
            for form in (
                secret,
                json.dumps(secret)[1:-1],
                repr(secret)[1:-1],
                quote(secret, safe=""),
                quote_plus(secret),
            )
        }
        # Longest first: a secret that contains another goes whole.
        self._forms = sorted(forms, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        for form in self._forms:
            line = line.replace(form, REDACTED)
        return line


class _SocketLineWithoutQuery(logging.Filter):
    """uvicorn writes a line per socket handshake with the path *and* query string,
    where an older web chat client puts its token (`?token=`): the query goes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            isinstance(record.msg, str)
            and record.msg.startswith('%s - "WebSocket %s"')
            and isinstance(record.args, tuple)
            and len(record.args) >= 2
            and isinstance(record.args[1], str)
        ):
            path = record.args[1].partition("?")[0]
            record.args = (record.args[0], path, *record.args[2:])
        return True


_SOCKET_QUERY = _SocketLineWithoutQuery()
