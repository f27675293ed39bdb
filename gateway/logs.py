"""Structured logging: readable on a terminal, JSON lines otherwise, for our own logs and
for every library's (uvicorn, arq, httpx, python-telegram-bot) alike.

Our code logs through structlog; the libraries log through the standard library. Both
end in one handler on the root logger whose formatter runs structlog's processors, so
every line has the same shape, level filter and time stamp. Context bound with
`structlog.contextvars` (the request id) is on every line written while it is bound.
"""

from __future__ import annotations

import logging
import sys

import structlog

# Library loggers that bring handlers of their own or are too chatty at info.
_QUIET = {
    # Request URLs of the Bot API contain the bot token: never log them.
    "httpx": logging.WARNING,
    "httpcore": logging.WARNING,
    # Replaced by our access line, which carries the request id and no query string.
    "uvicorn.access": logging.CRITICAL + 1,
}


def configure_logging(level: str = "info") -> None:
    numeric = logging.getLevelName(level.upper())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer()
        if sys.stderr.isatty()
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
        structlog.stdlib.ProcessorFormatter(
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
    for name, quiet in _QUIET.items():
        logging.getLogger(name).setLevel(max(quiet, numeric))
