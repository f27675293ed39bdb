"""Every error the gateway logs or leaves unhandled, from any thread, owned by examples.

Captured as exception objects with whole tracebacks, and sorted into one failure type
per crash site, so Hypothesis reports each place the server crashed separately.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import structlog


class ErrorLog:
    """Errors the server logged or raised unhandled, from any thread.

    Each example owns the errors logged from its start (`begin`) to its check
    (`unchecked`), and those logged after the previous example passed its check, so
    nothing falls between examples; an example that failed before its check leaves its
    errors behind with it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[str] = []
        self._checked = 0
        self._begun = 0
        self._open = False

    def add(self, entry: str) -> None:
        with self._lock:
            self._entries.append(entry)

    def mark(self) -> int:
        with self._lock:
            return len(self._entries)

    def since(self, mark: int | None = None) -> list[str]:
        """Errors logged after `mark`, or since the example began."""
        with self._lock:
            return self._entries[self._begun if mark is None else mark :]

    def begin(self) -> None:
        with self._lock:
            if self._open:  # the previous example failed before its check
                self._checked = len(self._entries)
            self._open = True
            self._begun = len(self._entries)

    def unchecked(self) -> list[str]:
        with self._lock:
            new = self._entries[self._checked :]
            self._checked = len(self._entries)
            self._open = False
            return new


def format_exception(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    return "\n" + "".join(traceback.format_exception(exc)).rstrip()


class _ErrorRecords(logging.Handler):
    """Stdlib logging at ERROR and above: uvicorn's "Exception in ASGI application",
    asyncio's "Task exception was never retrieved", and any library's errors."""

    def __init__(self, log: ErrorLog) -> None:
        super().__init__(logging.ERROR)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        self._log.add(f"[{record.name}] {record.getMessage()}{format_exception(exc)}")


_STRUCTLOG_ERRORS = frozenset({"error", "exception", "critical", "fatal"})


def _structlog_recorder(log: ErrorLog) -> Callable[[Any, str, MutableMapping[str, Any]], Any]:
    def record(_: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
        if method_name in _STRUCTLOG_ERRORS:
            fields = {k: v for k, v in event_dict.items() if k not in ("event", "exc_info")}
            exc_info = event_dict.get("exc_info")
            # An exception given, or (`exc_info=True`, `log.exception`) the one in hand.
            exc = exc_info if isinstance(exc_info, BaseException) else None
            if exc is None and exc_info:
                exc = sys.exc_info()[1]
            log.add(
                f"[structlog {method_name}] {event_dict.get('event')} {fields}"
                f"{format_exception(exc)}"
            )
        return event_dict

    return record


@contextlib.contextmanager
def capture_errors(log: ErrorLog) -> Iterator[None]:
    """Record every error the gateway logs, through stdlib logging or structlog.

    uvicorn's loggers do not propagate to the root, so its logger gets the handler too
    (after the servers started: each uvicorn config resets its loggers' handlers). The
    structlog recorder goes into the shared processor list in place, so loggers already
    bound (and cached) see it too.
    """
    handler = _ErrorRecords(log)
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
    processors: list[Any] = structlog.get_config()["processors"]
    recorder = _structlog_recorder(log)
    processors.insert(0, recorder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            processors.remove(recorder)
        for logger in loggers:
            logger.removeHandler(handler)


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_CRASH_TYPES: dict[str, type[AssertionError]] = {}


def crash_type(log: list[str]) -> type[AssertionError]:
    """An AssertionError subclass per place the server crashed (its innermost frame in
    Parley's own code, and the exception), so Hypothesis reports each crash site as a
    distinct failure instead of folding every 5xx into one."""
    site = "unknown"
    if log:
        trace = log[0]
        ours = [
            (Path(path).name, line)
            for path, line in _FRAME.findall(trace)
            if not path.startswith("<")
            and "site-packages" not in path
            and "/lib/python3" not in path
        ]
        last = trace.strip().splitlines()[-1].split(":")[0]
        site = f"{ours[-1][0]}:{ours[-1][1]} {last}" if ours else last
    if site not in _CRASH_TYPES:
        _CRASH_TYPES[site] = type(
            "ServerCrash", (AssertionError,), {"__qualname__": f"ServerCrash[{site}]"}
        )
    return _CRASH_TYPES[site]


def crash(problem: str, log: list[str]) -> AssertionError:
    """The failure for `problem`, typed by where the server crashed, showing its log."""
    shown = "\n---\n".join(log) if log else "(nothing)"
    return crash_type(log)(f"{problem}\nserver log:\n{shown}")
