"""Fuzzing support: hostile-input strategies, oracles saying what the gateway must answer
to each input, and a real gateway on its own event loop with its error log captured.

The gateway runs in a background thread (`FuzzServer`), so Hypothesis tests stay
synchronous: examples call into the server's loop with `FuzzServer.call`, and use the
harness's async helpers there. In-process rather than `parley serve` as a child
because the error log then arrives as exception objects with whole tracebacks (no
stderr to drain and parse), the database is one `select` away, the fakes and helpers
are the ones every other test uses, and a gateway starts in a fraction of a second.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import logging
import math
import os
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Coroutine, Iterator, MutableMapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import structlog
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from memory.models import Message
from tests.fakes.graph_api import PHONE_NUMBER_ID, fake_graph, whatsapp_settings
from tests.fakes.llm_server import fake_llm
from tests.fakes.telegram_api import fake_telegram, telegram_settings
from tests.support.harness import Gateway, make_settings, running_gateway
from tests.support.platforms import Platforms
from tests.support.polling import eventually

T = TypeVar("T")

# Fresh platform ids for every example, so no run meets an earlier one's redelivery
# check or a chat's send pacing.
_ids = itertools.count(1)


def fresh_id() -> int:
    return next(_ids)


# -- limits of the fuzzed gateway ------------------------------------------------------

MAX_BODY_BYTES = 256 * 1024  # the default: deep nesting of 200,000 levels fits under it
MAX_MESSAGE_CHARS = 2_000  # small, so "too long" costs little to generate
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
START_SECONDS = 30.0
CALL_SECONDS = 60.0
ANSWER_SECONDS = 15.0
LOG_SECONDS = 2.0


def gateway_settings() -> dict[str, Any]:
    """Extra settings of every fuzzed gateway: the limits the oracles assume, and the
    abuse limits out of the way (thousands of requests come from one address)."""
    return {
        "max_body_bytes": MAX_BODY_BYTES,
        "max_message_chars": MAX_MESSAGE_CHARS,
        "reply_wait_seconds": ANSWER_SECONDS,
        "delivery_retry_base_seconds": 0.01,
        "telegram_policy": "open",
        "whatsapp_policy": "open",
        "webchat_sessions_per_minute": 1_000_000,
        "webchat_messages_per_minute": 1_000_000,
        "webchat_sockets_per_visitor": 1_000,
    }


def examples(count: int) -> settings:
    """Hypothesis settings: bounded, reproducible (derandomized), no example database.

    `PARLEY_TEST_FUZZ_SCALE` multiplies the counts for a longer local run.
    """
    scale = float(os.environ.get("PARLEY_TEST_FUZZ_SCALE", "1"))
    return settings(
        max_examples=max(1, int(count * scale)),
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )


# -- the server's error log ------------------------------------------------------------


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
        self._open = False

    def add(self, entry: str) -> None:
        with self._lock:
            self._entries.append(entry)

    def mark(self) -> int:
        with self._lock:
            return len(self._entries)

    def since(self, mark: int) -> list[str]:
        with self._lock:
            return self._entries[mark:]

    def begin(self) -> None:
        with self._lock:
            if self._open:  # the previous example failed before its check
                self._checked = len(self._entries)
            self._open = True

    def unchecked(self) -> list[str]:
        with self._lock:
            new = self._entries[self._checked :]
            self._checked = len(self._entries)
            self._open = False
            return new


def _format_exception(exc: BaseException | None) -> str:
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
        self._log.add(f"[{record.name}] {record.getMessage()}{_format_exception(exc)}")


_STRUCTLOG_ERRORS = frozenset({"error", "exception", "critical", "fatal"})


def _structlog_recorder(log: ErrorLog) -> Callable[[Any, str, MutableMapping[str, Any]], Any]:
    def record(_: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
        if method_name in _STRUCTLOG_ERRORS:
            fields = {k: v for k, v in event_dict.items() if k not in ("event", "exc_info")}
            exc = sys.exc_info()[1] if event_dict.get("exc_info") else None
            if isinstance(event_dict.get("exc_info"), BaseException):
                exc = event_dict["exc_info"]
            log.add(
                f"[structlog {method_name}] {event_dict.get('event')} {fields}{_format_exception(exc)}"
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


# -- the gateway on a background loop ------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """A message row as the database holds it."""

    id: int
    conversation_id: uuid.UUID
    seq: int
    role: str
    channel: str
    text: str
    author_name: str
    delivery: str | None
    reply_to_seq: int | None


class FuzzServer:
    """A real gateway (web chat, Telegram and WhatsApp against the fake platforms, the
    fake model) on 127.0.0.1, run by its own event loop in a background thread."""

    def __init__(self, database_url: str, data_dir: Path) -> None:
        self._database_url = database_url
        self._data_dir = data_dir
        self.errors = ErrorLog()
        self._ready: concurrent.futures.Future[Platforms] = concurrent.futures.Future()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._platforms: Platforms | None = None
        self._example_mark = 0
        self._thread = threading.Thread(target=self._run, name="fuzz-gateway", daemon=True)

    # -- lifecycle --

    def start(self) -> None:
        self._thread.start()
        self._platforms = self._ready.result(timeout=START_SECONDS)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=START_SECONDS)
        assert not self._thread.is_alive(), "the gateway did not stop"

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # handed to the test thread
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                self.errors.add(f"[fuzz server] the gateway's loop crashed{_format_exception(exc)}")

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_error)
        self._loop = loop
        self._stop = asyncio.Event()
        # The fakes stop together once the gateway has (each takes a few of uvicorn's
        # 0.1 s ticks; one after the other they would add up over a whole suite).
        entered: list[contextlib.AbstractAsyncContextManager[Any]] = []

        async def enter(fake: contextlib.AbstractAsyncContextManager[T]) -> T:
            value = await fake.__aenter__()
            entered.append(fake)
            return value

        try:
            llm = await enter(fake_llm())
            tg = await enter(fake_telegram())
            wa = await enter(fake_graph())
            values = telegram_settings(tg) | whatsapp_settings(wa) | gateway_settings()
            settings = make_settings(self._database_url, self._data_dir, llm, **values)
            async with running_gateway(settings) as gw:
                self._ready.set_result(Platforms(gw, tg, wa))
                await self._stop.wait()
        finally:
            outcomes = await asyncio.gather(
                *(fake.__aexit__(None, None, None) for fake in entered), return_exceptions=True
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome

    def _loop_error(self, _: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.errors.add(
            f"[asyncio] {context.get('message')}"
            f"{_format_exception(exc if isinstance(exc, BaseException) else None)}"
        )

    # -- using it from the test thread --

    @property
    def platforms(self) -> Platforms:
        assert self._platforms is not None, "server not started"
        return self._platforms

    @property
    def gw(self) -> Gateway:
        return self.platforms.gw

    @property
    def url(self) -> str:
        return self.gw.url

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_SECONDS) -> T:
        """Run `coro` on the server's loop and wait for its result."""
        assert self._loop is not None, "server not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> httpx.Response:
        return self.call(self.gw.http.request(method, url, content=content, headers=headers))

    def visitor(self) -> tuple[str, uuid.UUID]:
        token, conversation_id = self.call(self.gw.visitor())
        return token, uuid.UUID(conversation_id)

    def ws_url(self, token: str) -> str:
        return self.url.replace("http", "ws", 1) + "/webchat/ws?token=" + quote(token, safe="")

    # -- the database --

    def last_message_id(self) -> int:
        async def query() -> int:
            async with self.gw.services.engine.connect() as connection:
                value = (await connection.execute(select(func.max(Message.id)))).scalar()
            return int(value or 0)

        return self.call(query())

    async def _rows_after(self, mark: int) -> list[Stored]:
        query = (
            select(
                Message.id,
                Message.conversation_id,
                Message.seq,
                Message.role,
                Message.channel,
                Message.text,
                Message.author_name,
                Message.delivery,
                Message.reply_to_seq,
            )
            .where(Message.id > mark)
            .order_by(Message.id)
        )
        async with self.gw.services.engine.connect() as connection:
            rows = (await connection.execute(query)).all()
        return [Stored(*row) for row in rows]

    def incoming_since(self, mark: int) -> list[Stored]:
        """Messages stored after `mark` that answer nothing: what came in, not the
        assistant's replies or the gateway's answers to commands."""
        rows = self.call(self._rows_after(mark))
        return [row for row in rows if row.reply_to_seq is None and row.role != "assistant"]

    def wait_until_answered(self, message: Stored) -> Stored:
        """The answer to `message`, once stored and delivered (or failed),
        or an assertion error naming what the server logged meanwhile."""
        errors = self.errors.mark()

        async def reply() -> Stored | None:
            for row in await self._rows_after(message.id):
                # The model's reply, or the gateway's answer to a command.
                if (
                    row.conversation_id == message.conversation_id
                    and (row.reply_to_seq or 0) >= message.seq
                ):
                    return row
            return None

        def settled(row: Stored | None) -> bool:
            if self.errors.since(errors):
                return True
            return row is not None and row.delivery != "pending"

        try:
            found = self.call(eventually(reply, until=settled, seconds=ANSWER_SECONDS))
        except TimeoutError:
            found = None
        problem = (
            f"message {message.seq} ({message.text[:80]!r}) was not answered and delivered "
            f"(waited up to {ANSWER_SECONDS}s or until an error); "
            f"server errors: {self.errors.since(errors)}"
        )
        if self.errors.since(errors):
            raise crash_type(self.errors.since(errors))(problem)
        assert found is not None, problem
        assert found.delivery != "pending", problem
        return found

    def begin(self, example: object = None) -> None:
        """An example starts: what it causes is checked by `assert_no_errors`. Its input
        goes into Hypothesis's report (which prints arguments blank here)."""
        if example is not None:
            shown = repr(example)
            note(f"input: {shown if len(shown) < 3000 else shown[:3000] + ' ...'}")
        self.errors.begin()
        self._example_mark = self.errors.mark()

    def failure(self, problem: str) -> AssertionError:
        """An assertion error for a 5xx or a dropped socket, carrying what the server
        logged for it (uvicorn logs an exception just after it answered 500, so this
        waits a moment for it, and takes it so no later example is blamed)."""
        mark = self._example_mark

        async def logged() -> list[str]:
            return self.errors.since(mark)

        with contextlib.suppress(TimeoutError):
            self.call(eventually(logged, until=bool, seconds=LOG_SECONDS))
        log = self.errors.unchecked()
        shown = "\n---\n".join(log) if log else "(nothing)"
        return crash_type(log)(f"{problem}\nserver log:\n{shown}")

    def assert_not_5xx(self, response: httpx.Response, what: object) -> None:
        if response.status_code >= 500:
            raise self.failure(f"{response.status_code} for {what!r}: {response.text[:300]!r}")

    def assert_healthy(self) -> None:
        """After the fuzzing: probes answer, and a normal message on every channel is
        stored and answered, with nothing in the error log meanwhile."""
        self.begin()
        assert self.request("GET", "/healthz").status_code == 200
        assert self.request("GET", "/readyz").status_code == 200
        token, _ = self.visitor()
        response = self.call(self.gw.send(token, "still there?"))
        assert response.status_code == 200, response.text
        assert response.json()["reply"] is not None
        update = TelegramCase("text", "hello again", "Ann", "Lee", ()).build(fresh_id())
        notification = WhatsAppCase("text", "hello again", "Ann", ()).build(
            fresh_id(), PHONE_NUMBER_ID
        )
        sends: list[Callable[[], Coroutine[Any, Any, httpx.Response]]] = [
            lambda: self.platforms.telegram(update),
            lambda: self.platforms.whatsapp(notification),
        ]
        for send in sends:
            before = self.last_message_id()
            assert self.call(send()).status_code == 200
            [stored] = self.incoming_since(before)
            self.wait_until_answered(stored)
        self.assert_no_errors("normal messages after fuzzing")

    def assert_no_errors(self, what: object) -> None:
        new = self.errors.unchecked()
        if new:
            shown = "\n---\n".join(new)
            raise crash_type(new)(f"the server logged errors for {what!r}:\n{shown}")


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


@contextlib.contextmanager
def fuzz_server(database_url: str, data_dir: Path) -> Iterator[FuzzServer]:
    server = FuzzServer(database_url, data_dir)
    server.start()
    with capture_errors(server.errors):
        try:
            yield server
        finally:
            server.begin()
            server.stop()
            server.assert_no_errors("shutting down")


# -- looking at answers -----------------------------------------------------------------


def assert_json_error(response: httpx.Response, what: object) -> None:
    """A refusal from our own API is JSON with a `detail` (its echo must encode)."""
    try:
        body = response.json()
    except ValueError as exc:
        raise AssertionError(
            f"{response.status_code} for {what!r} is not JSON: {response.content[:200]!r}"
        ) from exc
    assert isinstance(body, dict), body
    assert "detail" in body, body


def is_4xx(status: int) -> bool:
    return 400 <= status < 500


# -- text and what cleaning makes of it ---------------------------------------------------

NUL = "\x00"
LONE_SURROGATES = ("\ud800", "\udbff", "\udc00", "\udfff", "\ud83d")
NONCHARACTERS = ("\ufffe", "\uffff", "\ufdd0", "\ufdef", "\U0001fffe", "\U0010ffff")
BIDI = ("\u202e", "\u202d", "\u2066", "\u2067", "\u2069", "\u200f", "\u061c")
ODD_TEXT = (
    "\x01",
    "\x1b[31m",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\u200b",
    "\u00a0",
    "\u3000",
    "\r\n",
    "\t",
    "e\u0301",
    "\U0001f600",
    "\U0001f1fa\U0001f1f8",
    "\\u0000",
    "%00",
    "&#0;",
    "[source: operator via REST]",
    "{{7*7}}",
    "<script>alert(1)</script>",
    "'; DROP TABLE messages; --",
    "\ufffd",
)
SPECIAL_TEXT = (NUL, *LONE_SURROGATES, *NONCHARACTERS, *BIDI, *ODD_TEXT)

# Every code point, surrogates and NUL included.
any_character = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
plain_text = st.text(
    st.characters(codec="utf-8", categories=["L", "N", "P", "Zs", "So"]), min_size=1, max_size=30
)
fuzz_text = st.lists(
    st.one_of(
        st.sampled_from(SPECIAL_TEXT),
        st.text(any_character, max_size=4),
        plain_text,
    ),
    max_size=10,
).map("".join)


def long_text(limit: int) -> st.SearchStrategy[str]:
    """Text around a length limit, in code points (some outside the BMP)."""
    return st.tuples(
        st.sampled_from([limit - 1, limit, limit + 1, 3 * limit]),
        st.sampled_from(["x", "é", "\U0001f600", " a"]),
    ).map(lambda pair: LongText((pair[1] * pair[0])[: pair[0]]))


def has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def is_noncharacter(c: str) -> bool:
    code = ord(c)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


def has_noncharacter(text: str) -> bool:
    return any(is_noncharacter(c) for c in text)


def unsafe_text(text: str) -> bool:
    """Text our own APIs refuse (422): NUL or lone surrogates."""
    return NUL in text or has_surrogate(text)


def as_received(text: str) -> str:
    """What a JSON reader gets from `text` sent as JSON (escaped surrogate pairs join)."""
    decoded: str = json.loads(json.dumps(text))
    return decoded


def clean(text: str) -> str:
    """What a platform's text must become: NUL removed, lone surrogates U+FFFD."""
    received = as_received(text).replace(NUL, "")
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in received)


_REPLACEMENTS = re.compile("\ufffd+")


def _canonical(text: str) -> str:
    # Non-characters may be kept or replaced; replacements may come one per code unit.
    text = "".join("\ufffd" if is_noncharacter(c) else c for c in text)
    return _REPLACEMENTS.sub("\ufffd", text)


def cleaned_equal(stored: str, sent: str) -> bool:
    """Is `stored` the cleaned form of platform text `sent`?"""
    return _canonical(stored) == _canonical(clean(sent))


def cleaned_within(stored: str, sent: str, *, at_end: bool = False) -> bool:
    """Does `stored` contain (or end with) the cleaned form of `sent`?"""
    part, whole = _canonical(clean(sent)), _canonical(stored)
    return whole.endswith(part) if at_end else part in whole


def check_clean_name(stored: str, sent: str, what: object) -> None:
    """A stored display name: clean always; equal to the cleaned name when it fits."""
    assert not unsafe_text(stored), f"unsafe author name stored for {what!r}: {stored!r}"
    expected = clean(sent)
    if len(expected) <= 64:
        assert cleaned_equal(stored, sent), f"author name {stored!r}, sent {sent!r}"


# -- JSON the way an RFC 8259 reader sees it -------------------------------------------------


class Verdict(Enum):
    ACCEPT = "accept"
    REJECT = "reject"
    EITHER = "either"  # a stricter or a more lenient server are both right


@dataclass(frozen=True)
class Expect:
    verdict: Verdict
    why: str
    # For REJECT: the statuses allowed (empty: any 4xx).
    statuses: frozenset[int] = frozenset()
    # For ACCEPT/EITHER: the text that must be stored, and the client id.
    text: str | None = None
    client_id: str | None = None

    def allows(self, status: int) -> bool:
        if self.verdict is Verdict.ACCEPT:
            return status == 200
        if self.verdict is Verdict.REJECT:
            return status in self.statuses if self.statuses else is_4xx(status)
        return status == 200 or is_4xx(status)


def reject(why: str, *statuses: int) -> Expect:
    return Expect(Verdict.REJECT, why, frozenset(statuses))


class NotJSON(ValueError):
    pass


@dataclass
class JSONNotes:
    duplicate_keys: bool = False
    big_ints: list[int] = field(default_factory=list)
    lenient_encoding: bool = False  # not UTF-8, yet Python's json reads it (BOM, UTF-16)


def strict_json(raw: bytes | str) -> tuple[Any, JSONNotes]:
    """Parse as RFC 8259 JSON: UTF-8, no NaN/Infinity, no raw control characters."""
    notes = JSONNotes()
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            try:
                json.loads(raw)
            except (ValueError, RecursionError):
                raise NotJSON("not UTF-8") from None
            notes.lenient_encoding = True
            text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    else:
        text = raw
    if text.startswith("\ufeff"):
        notes.lenient_encoding = True
        text = text[1:]

    def constant(name: str) -> Any:
        raise NotJSON(f"{name} is not JSON")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in items]
        if len(set(keys)) != len(keys):
            notes.duplicate_keys = True
        return dict(items)

    def integer(digits: str) -> int:
        value = int(digits)
        if not INT64_MIN <= value <= INT64_MAX:
            notes.big_ints.append(value)
        return value

    try:
        value = json.loads(
            text, parse_constant=constant, object_pairs_hook=pairs, parse_int=integer
        )
    except RecursionError:
        raise NotJSON("nested too deeply") from None
    except NotJSON:
        raise
    except ValueError as exc:
        raise NotJSON(str(exc)) from None
    return value, notes


def _huge_float(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


# -- what the web chat API must answer ----------------------------------------------------

_CLIENT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


def _client_id_verdict(client_id: Any) -> Verdict:
    if client_id is None:
        return Verdict.ACCEPT
    if not isinstance(client_id, str):
        return Verdict.REJECT
    if client_id.isascii():
        return Verdict.ACCEPT if _CLIENT_ID.fullmatch(client_id) else Verdict.REJECT
    if unsafe_text(client_id) or not 1 <= len(client_id) <= 100:
        return Verdict.REJECT
    return Verdict.EITHER  # \w differs between regex engines outside ASCII


def _text_verdict(text: Any) -> tuple[Verdict, str]:
    if not isinstance(text, str):
        return Verdict.REJECT, "text is not a string"
    if NUL in text:
        return Verdict.REJECT, "NUL in text"
    if has_surrogate(text):
        return Verdict.REJECT, "lone surrogate in text"
    if not text.strip():
        return Verdict.REJECT, "blank text"
    if len(text) > MAX_MESSAGE_CHARS:
        return Verdict.REJECT, "text too long"
    if has_noncharacter(text):
        return Verdict.EITHER, "non-character in text"
    return Verdict.ACCEPT, "a message"


def expect_send(raw: bytes, content_type: str | None) -> Expect:
    """What `POST /webchat/messages` must answer to this body."""
    if len(raw) > MAX_BODY_BYTES:
        return reject("body over the limit", 413)
    try:
        body, notes = strict_json(raw)
    except NotJSON as exc:
        return reject(f"not JSON ({exc})", 400, 422)
    expect = _expect_send(body, notes, content_type)
    if notes.lenient_encoding and expect.verdict is Verdict.REJECT:
        return reject(expect.why)  # a reader that refuses a BOM or UTF-16 may say 400
    return expect


def _expect_send(body: Any, notes: JSONNotes, content_type: str | None) -> Expect:
    if notes.big_ints:
        return reject("integer past 64 bits", 422)
    if not isinstance(body, dict):
        return reject("not an object", 422)
    unknown = set(body) - {"text", "client_id"}
    if unknown or "text" not in body:
        return reject("unknown or missing fields", 422)
    text_verdict, why = _text_verdict(body["text"])
    verdicts = {text_verdict, _client_id_verdict(body.get("client_id"))}
    if Verdict.REJECT in verdicts:
        status = 422
        return reject(why if text_verdict is Verdict.REJECT else "bad client_id", status)
    lenient = notes.duplicate_keys or notes.lenient_encoding
    # Without a JSON content type a server may or may not read the body as JSON.
    json_type = content_type is not None and content_type.split(";")[0] == "application/json"
    if Verdict.EITHER in verdicts or lenient or not json_type:
        verdict = Verdict.EITHER
    else:
        verdict = Verdict.ACCEPT
    return Expect(verdict, why, text=body["text"], client_id=body.get("client_id"))


# -- what the web chat socket must answer -----------------------------------------------------


class FrameVerdict(Enum):
    ACK = "ack"  # stored once, acknowledged
    ERROR = "error"  # an error frame, nothing stored
    RESUMED = "resumed"  # a resume: no error frame
    EITHER = "either"  # an ack or an error frame, or a resume


@dataclass(frozen=True)
class FrameExpect:
    verdict: FrameVerdict
    why: str
    text: str | None = None


def expect_frame(raw: str | bytes) -> FrameExpect:
    """What the socket must do with one client frame."""
    if isinstance(raw, bytes):
        return FrameExpect(FrameVerdict.ERROR, "a binary frame")
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        return FrameExpect(FrameVerdict.ERROR, "frame over the body limit")
    try:
        frame, notes = strict_json(raw)
    except NotJSON as exc:
        return FrameExpect(FrameVerdict.ERROR, f"not JSON ({exc})")
    if not isinstance(frame, dict) or frame.get("type") not in ("message", "resume"):
        return FrameExpect(FrameVerdict.ERROR, "not a known frame")
    extra = set(frame) - {"type", "text", "client_id", "after_seq"}
    lenient = bool(extra) or notes.duplicate_keys
    if frame["type"] == "resume":
        after = frame.get("after_seq")
        if isinstance(after, bool) or (isinstance(after, (float, str)) and not _huge_float(after)):
            return FrameExpect(FrameVerdict.EITHER, "after_seq of a coercible type")
        if not isinstance(after, int) or not 0 <= after <= INT64_MAX:
            return FrameExpect(FrameVerdict.ERROR, f"after_seq {after!r}")
        if lenient or "text" in frame or "client_id" in frame:
            return FrameExpect(FrameVerdict.EITHER, "resume with extra fields")
        return FrameExpect(FrameVerdict.RESUMED, "a resume")
    text_verdict, why = _text_verdict(frame.get("text"))
    verdicts = {text_verdict, _client_id_verdict(frame.get("client_id"))}
    if Verdict.REJECT in verdicts:
        return FrameExpect(
            FrameVerdict.ERROR, why if text_verdict is Verdict.REJECT else "bad client_id"
        )
    if Verdict.EITHER in verdicts or lenient or notes.big_ints or "after_seq" in frame:
        return FrameExpect(FrameVerdict.EITHER, "a message with extras", frame["text"])
    return FrameExpect(FrameVerdict.ACK, "a message", frame["text"])


# -- numbers and query strings ----------------------------------------------------------------

BOUNDARY_INTS = (
    0,
    1,
    -1,
    2**31 - 1,
    2**31,
    2**32,
    2**53 + 1,
    INT64_MAX,
    INT64_MAX + 1,
    2**64,
    10**30,
    INT64_MIN,
    INT64_MIN - 1,
    -(10**30),
)
any_int = st.one_of(st.sampled_from(BOUNDARY_INTS), st.integers(-5, 1200), st.integers())
NUMERIC_JUNK = (
    "",
    "NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "inf",
    "1e3",
    "1.0",
    "1.5",
    "0x10",
    " 1",
    "1 ",
    "+1",
    "-0",
    "١٢",
    "1_000",
    "0" * 400 + "1",
    "9" * 400,
    "true",
    "null",
    "[]",
    "\x00",
    "1\x00",
)
query_value = st.one_of(
    any_int.map(str),
    st.sampled_from(NUMERIC_JUNK),
    fuzz_text,
)


def query_string(params: dict[str, str]) -> str:
    """A query string of arbitrary text, percent-encoded from UTF-8 (surrogates kept as
    the invalid bytes they become)."""
    return "&".join(
        f"{quote(key)}={quote(value.encode('utf-8', 'surrogatepass'), safe='')}"
        for key, value in params.items()
    )


def int_param(value: str, low: int, high: int) -> Verdict:
    """Is this query value an int in [low, high]: ACCEPT, REJECT, or EITHER (coercible)."""
    if re.fullmatch(r"-?[0-9]{1,30}", value):
        return Verdict.ACCEPT if low <= int(value) <= high else Verdict.REJECT
    return Verdict.EITHER


# -- inputs that print short --------------------------------------------------------------

_SHOWN = 300


class Blob(bytes):
    """Bytes that print abbreviated: a failing example's report stays readable, and
    Hypothesis does not warn about (here: fail on) a 200 kB repr."""

    def __repr__(self) -> str:
        if len(self) <= _SHOWN:
            return bytes.__repr__(self)
        return f"{bytes(self[:60])!r} + ... ({len(self)} bytes)"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


class LongText(str):
    """Text that prints abbreviated, like `Blob`."""

    __slots__ = ()

    def __repr__(self) -> str:
        if len(self) <= _SHOWN:
            return str.__repr__(self)
        return f"{str(self[:60])!r} + ... ({len(self)} characters)"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


# -- JSON values and raw bodies -----------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    any_int,
    st.floats(allow_nan=True, allow_infinity=True),
    fuzz_text,
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(fuzz_text, children, max_size=3)
    ),
    max_leaves=6,
)


def to_json(value: Any, *, ascii_only: bool = True) -> Blob:
    """JSON as a sloppy client writes it: NaN allowed, surrogates passed through."""
    return Blob(
        json.dumps(value, ensure_ascii=ascii_only, allow_nan=True).encode("utf-8", "surrogatepass")
    )


FIXED_JUNK: tuple[bytes, ...] = (
    b"",
    b" ",
    b"null",
    b"0",
    b"[]",
    b"{}",
    b'"text"',
    b"NaN",
    b"-Infinity",
    b"\xff\xfe\x00",
    b"\xef\xbb\xbf{}",
    b'{"text": "hi \xff\xfe"}',
    b'{"text": "\xed\xa0\x80"}',  # an encoded lone surrogate
    b'{"text": "\xc0\x80"}',  # an overlong NUL
    b'{"text": "\xf4\x90\x80\x80"}',  # past U+10FFFF
    b'{"text": "a\\u0000b"}',
    b'{"text": "\\ud800"}',
    b'{"text": "\\udc00\\ud800"}',
    b'{"text": "\\uffff\\ufffe"}',
    b'{"text": "\\u202egnp.exe"}',
    b'{"text": NaN}',
    b'{"text": "hi", "client_id": Infinity}',
    b'{"text": "hi", "client_id": 1' + b"0" * 400 + b"}",
    b'{"text": 1e400}',
    b'{"text": "a", "text": "b"}',
    b'{"text": "hi"} trailing',
    b'{"text": "hi"}\x00',
    b'{"text": "hi"',
    b'{"text": "\x00"}',
    b'{"text": "line\nbreak"}',
    b'{"update_id": 18446744073709551617}',
    b'{"update_id": 1, "message": {"message_id": 1, "date": 1e400}}',
    b'{"type": "resume", "after_seq": NaN}',
    b'{"type": "resume", "after_seq": 1' + b"0" * 30 + b"}",
    '{"text": "hi"}'.encode("utf-16"),
)
NESTING_DEPTHS = (64, 2_000, 100_000, 200_000)


def _nested(depth: int, shape: int) -> bytes:
    if shape == 0:
        return b"[" * depth
    if shape == 1:
        return b'{"a":' * depth
    if shape == 2:
        return b'{"text": ' + b"[" * depth + b"]" * depth + b"}"
    return b"[" * depth + b"]" * depth


deep_bodies = st.builds(_nested, st.sampled_from(NESTING_DEPTHS), st.integers(0, 3))
oversized_bodies = st.sampled_from([MAX_BODY_BYTES + 1, 2 * MAX_BODY_BYTES]).map(
    lambda size: b'{"text": "' + b"x" * size + b'"}'
)
junk_bodies: st.SearchStrategy[bytes] = st.one_of(
    st.sampled_from(FIXED_JUNK),
    st.binary(max_size=40),
    deep_bodies,
    json_values.map(to_json),
    oversized_bodies,
).map(Blob)

valid_client_ids = st.from_regex(r"[A-Za-z0-9_.:-]{1,100}", fullmatch=True)


def weighted(choices: dict[str, int]) -> st.SearchStrategy[str]:
    """One of the keys, as often as its weight says (shrinking towards the first)."""
    return st.sampled_from([key for key, weight in choices.items() for _ in range(weight)])


# Text with at least one hostile character, somewhere.
special_text = st.tuples(
    st.text(st.characters(codec="ascii", categories=["L", "N"]), max_size=4),
    st.sampled_from(SPECIAL_TEXT),
    fuzz_text,
).map("".join)


@st.composite
def message_texts(draw: st.DrawFn, limit: int = MAX_MESSAGE_CHARS) -> str:
    kind = draw(weighted({"plain": 3, "special": 4, "fuzz": 2, "long": 1}))
    if kind == "plain":
        return draw(plain_text)
    if kind == "special":
        return draw(special_text)
    if kind == "fuzz":
        return draw(fuzz_text)
    return draw(long_text(limit))


@st.composite
def client_ids(draw: st.DrawFn) -> Any:
    kind = draw(weighted({"valid": 3, "text": 1, "other": 1}))
    if kind == "valid":
        return draw(valid_client_ids)
    return draw(fuzz_text if kind == "text" else json_scalars)


@st.composite
def webchat_bodies(draw: st.DrawFn) -> bytes:
    """Bodies for `POST /webchat/messages`: mostly message-shaped, some junk."""
    shape = draw(weighted({"message": 7, "junk": 2, "no text": 1}))
    if shape == "junk":
        return draw(junk_bodies)
    body: dict[str, Any] = {}
    if shape == "message":
        text = draw(weighted({"text": 9, "other": 1}))
        body["text"] = draw(message_texts() if text == "text" else json_scalars)
    if draw(st.booleans()):
        body["client_id"] = draw(client_ids())
    if draw(st.integers(0, 7)) == 0:
        body[draw(fuzz_text)] = draw(json_values)
    return to_json(body, ascii_only=draw(st.booleans()))


content_types = st.sampled_from(
    ["application/json"] * 8 + ["application/json; charset=utf-8", "text/plain", None]
)


# Header values as raw bytes: anything HTTP allows in a field value (visible ASCII,
# space, tab and the obs-text bytes 0x80-0xFF). Control characters are the HTTP
# parser's to refuse, before the app sees them.
def field_value(raw: bytes) -> bytes:
    return bytes(c for c in raw if (c >= 0x20 and c != 0x7F) or c == 0x09).strip(b" \t")


header_bytes = st.binary(max_size=60).map(field_value)


# Shaped like a visitor token (prefix, visitor id, signature), signed by nobody.
TOKEN_LIKE = "wc1.0f1e2d3c4b5a69788796a5b4c3d2e1f0.Q2hlY2tzdW0tdGhhdC1pcy1ub3QtcmVhbC0wMTIzNDU2Nzg"


@st.composite
def authorization_headers(draw: st.DrawFn) -> bytes:
    """Odd Authorization values, some close to a token."""
    return field_value(_authorization(draw, TOKEN_LIKE.encode()))


def _authorization(draw: st.DrawFn, token: bytes) -> bytes:
    choice = draw(st.integers(0, 6))
    if choice == 0:
        return draw(header_bytes)
    if choice == 1:
        return b"Bearer " + draw(header_bytes)
    if choice == 2:  # non-ASCII bytes spliced in
        at = draw(st.integers(0, len(token)))
        return (
            b"Bearer "
            + token[:at]
            + draw(st.binary(min_size=1, max_size=4).map(lambda b: bytes(0x80 | c for c in b)))
            + token[at:]
        )
    if choice == 3:  # one character changed
        at = draw(st.integers(0, len(token) - 1))
        swap = draw(st.sampled_from([b"A", b"\xe9", b"~", b"."]))
        return b"Bearer " + token[:at] + swap + token[at + 1 :]
    if choice == 4:
        scheme = draw(st.sampled_from([b"Basic", b"bearer\xa0", b"B\xe9arer", b"", b"Token"]))
        return scheme + b" " + token
    if choice == 5:
        return b"Bearer " + draw(fuzz_text).encode("utf-8", "surrogatepass")
    return b"Bearer " + b"wc1." + draw(header_bytes) + b"." + draw(header_bytes)


@st.composite
def odd_tokens(draw: st.DrawFn) -> str:
    """`?token=` values of a web chat socket that no visitor has."""
    kind = draw(weighted({"spliced": 2, "text": 1, "bytes": 1}))
    if kind == "text":
        return draw(fuzz_text)
    if kind == "bytes":
        return draw(header_bytes).decode("latin-1")
    at = draw(st.integers(0, len(TOKEN_LIKE) - 1))
    odd = draw(st.sampled_from(["\u00e9", "\u202e", "\x00", "\ud800", "\u03a9", "A", "%", "&"]))
    return TOKEN_LIKE[:at] + odd + TOKEN_LIKE[at + 1 :]


# -- web chat socket frames ---------------------------------------------------------------------


@st.composite
def socket_frames(draw: st.DrawFn) -> str | bytes:
    """Client frames: junk JSON, wrong shapes, extra fields, huge ints, binary."""
    kind = draw(
        weighted({"message": 5, "resume": 2, "binary": 1, "junk": 1, "text": 1, "other": 1})
    )
    if kind == "binary":
        return draw(st.one_of(st.binary(max_size=40), st.sampled_from(FIXED_JUNK)).map(Blob))
    if kind == "junk":  # as text: invalid UTF-8 becomes U+FFFD on the way
        return LongText(draw(junk_bodies).decode("utf-8", "replace"))
    if kind == "text":
        return draw(fuzz_text).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    frame: dict[str, Any] = {}
    if kind == "message":
        frame["type"] = "message"
        text = draw(weighted({"text": 9, "other": 1}))
        frame["text"] = draw(message_texts() if text == "text" else json_scalars)
        if draw(st.booleans()):
            frame["client_id"] = draw(client_ids())
    elif kind == "resume":
        frame["type"] = "resume"
        number = draw(weighted({"int": 4, "other": 1}))
        frame["after_seq"] = draw(any_int if number == "int" else json_scalars)
    elif draw(st.booleans()):
        frame["type"] = draw(st.one_of(st.sampled_from(["dance", "", "MESSAGE"]), json_scalars))
    if draw(st.integers(0, 7)) == 0:
        frame[draw(st.sampled_from(["after_seq", "text", "client_id", "x"]))] = draw(json_values)
    return LongText(to_json(frame).decode("utf-8"))  # ASCII: surrogates travel escaped


# -- platform updates -----------------------------------------------------------------------------


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


DROP = _Drop()
# A change to one field of an update: the path from the message object ("$msg"), the
# update or notification root ("$root"), and the value (DROP removes the key).
Mutation = tuple[tuple[str, ...], Any]


def apply_mutations(anchors: dict[str, Any], mutations: tuple[Mutation, ...]) -> None:
    """Apply `mutations`; each path starts at one of `anchors` (objects of the payload)."""
    for path, value in mutations:
        target: Any = anchors[path[0]]
        for key in path[1:-1]:
            if not isinstance(target, dict):
                break
            target = target.setdefault(key, {})
        if not isinstance(target, dict):
            continue
        if value is DROP:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value


odd_values = st.one_of(
    json_scalars,
    st.sampled_from([[], {}, [1], {"a": 1}, "", -1, 0, 2**64, 10**30, INT64_MAX + 1]),
)


@dataclass(frozen=True)
class TelegramCase:
    """A Telegram update with fuzzed fields; `build` gives each run fresh ids."""

    kind: str  # "text", "caption" (a photo) or "edit"
    text: str
    first_name: str
    last_name: str | None
    mutations: tuple[Mutation, ...]

    @property
    def well_shaped(self) -> bool:
        return not self.mutations

    @property
    def full_name(self) -> str:
        # As Telegram clients (and python-telegram-bot) put it together.
        return f"{self.first_name} {self.last_name}" if self.last_name else self.first_name

    def build(self, n: int) -> dict[str, Any]:
        user_id = 700_000_000 + n
        sender: dict[str, Any] = {
            "id": user_id,
            "is_bot": False,
            "first_name": self.first_name,
            "username": f"fuzz{n}",
            "language_code": "en",
        }
        if self.last_name is not None:
            sender["last_name"] = self.last_name
        message: dict[str, Any] = {
            "message_id": n,
            "from": sender,
            "chat": {"id": user_id, "type": "private", "first_name": self.first_name},
            "date": 1_700_000_000,
        }
        if self.kind == "caption":
            message["photo"] = [
                {"file_id": "AgAD", "file_unique_id": "AQAD", "width": 90, "height": 67}
            ]
            message["caption"] = self.text
        else:
            message["text"] = self.text
        key = "edited_message" if self.kind == "edit" else "message"
        if self.kind == "edit":
            message["edit_date"] = 1_700_000_100
        update: dict[str, Any] = {"update_id": 500_000_000 + n, key: message}
        apply_mutations({"$root": update, "$msg": message}, self.mutations)
        return update


_TELEGRAM_PATHS: tuple[tuple[str, ...], ...] = (
    ("$root", "update_id"),
    ("$msg", "chat"),
    ("$msg", "from"),
    ("$msg", "date"),
    ("$msg", "message_id"),
    ("$msg", "text"),
    ("$msg", "entities"),
    ("$msg", "reply_to_message"),
    ("$msg", "chat", "id"),
    ("$msg", "chat", "type"),
    ("$msg", "chat", "title"),
    ("$msg", "from", "id"),
    ("$msg", "from", "is_bot"),
    ("$msg", "from", "first_name"),
    ("$msg", "from", "username"),
    ("$msg", "edit_date"),
    ("$msg", "photo"),
    ("$msg", "forward_origin"),
    ("$msg", "forward_from"),
    ("$msg", "forward_from_chat"),
    ("$msg", "forward_sender_name"),
)


@st.composite
def entity_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    return draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(
                        ["mention", "bot_command", "text_mention", "bold", "x"]
                    ),
                    "offset": st.one_of(st.integers(-2, 12), st.sampled_from(BOUNDARY_INTS)),
                    "length": st.one_of(st.integers(-2, 12), st.sampled_from(BOUNDARY_INTS)),
                }
            ),
            max_size=3,
        )
    )


def _forward_origin(kind: str, name: str) -> dict[str, Any]:
    origin: dict[str, Any] = {"type": kind, "date": 1_700_000_000}
    if kind == "user":
        origin["sender_user"] = {"id": 5, "is_bot": False, "first_name": name}
    elif kind == "hidden_user":
        origin["sender_user_name"] = name
    else:
        origin["chat"] = origin["sender_chat"] = {"id": -100, "type": "channel", "title": name}
        origin["message_id"] = 1
    return origin


# Forwarded messages: an origin (Bot API 7) or the older fields, with fuzzed names.
forward_values = st.one_of(
    st.builds(
        _forward_origin, st.sampled_from(["user", "hidden_user", "chat", "channel", "x"]), fuzz_text
    ),
    st.builds(lambda name: {"id": 5, "is_bot": False, "first_name": name}, fuzz_text),
    st.builds(lambda title: {"id": -100, "type": "channel", "title": title}, fuzz_text),
)

telegram_mutations = st.lists(
    st.tuples(
        st.sampled_from(_TELEGRAM_PATHS),
        st.one_of(
            st.just(DROP),
            odd_values,
            st.sampled_from(["group", "supergroup", "channel", "private", "secret"]),
            entity_lists(),
            forward_values,
        ),
    ),
    min_size=1,
    max_size=3,
).map(tuple)


@st.composite
def telegram_cases(draw: st.DrawFn) -> TelegramCase:
    # Telegram never sends an empty first name; one that is empty once cleaned, it may.
    names = st.one_of(plain_text, fuzz_text.filter(bool))
    return TelegramCase(
        kind=draw(st.sampled_from(["text", "text", "text", "caption", "edit"])),
        text=draw(message_texts(4096)),
        first_name=draw(names),
        last_name=draw(st.one_of(st.none(), names)),
        mutations=draw(st.one_of(st.just(()), st.just(()), telegram_mutations)),
    )


@dataclass(frozen=True)
class WhatsAppCase:
    """A WhatsApp notification with fuzzed fields; `build` gives each run fresh ids."""

    kind: str  # "text", "button", "interactive", "image" or "reaction"
    text: str
    name: str
    mutations: tuple[Mutation, ...]

    @property
    def well_shaped(self) -> bool:
        return not self.mutations

    def build(self, n: int, phone_number_id: str) -> dict[str, Any]:
        wa_id = f"1555{n:08d}"
        message: dict[str, Any] = {
            "from": wa_id,
            "id": f"wamid.FUZZ{n:010d}",
            # Now: a reply is only sent within 24 hours of the person's message.
            "timestamp": str(int(time.time())),
            "type": self.kind,
        }
        bodies: dict[str, dict[str, Any]] = {
            "text": {"body": self.text},
            "button": {"text": self.text, "payload": "fuzz"},
            "interactive": {
                "type": "button_reply",
                "button_reply": {"id": "fuzz", "title": self.text},
            },
            "image": {"caption": self.text, "mime_type": "image/jpeg", "id": "1234"},
            "reaction": {"message_id": "wamid.OLD", "emoji": self.text},
        }
        message[self.kind] = bodies[self.kind]
        contact: dict[str, Any] = {"profile": {"name": self.name}, "wa_id": wa_id}
        value: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": phone_number_id},
            "contacts": [contact],
            "messages": [message],
        }
        change: dict[str, Any] = {"field": "messages", "value": value}
        entry: dict[str, Any] = {"id": "102290129340398", "changes": [change]}
        root: dict[str, Any] = {"object": "whatsapp_business_account", "entry": [entry]}
        anchors = {
            "$root": root,
            "$entry": entry,
            "$change": change,
            "$value": value,
            "$contact": contact,
            "$msg": message,
        }
        apply_mutations(anchors, self.mutations)
        return root


_WHATSAPP_PATHS: tuple[tuple[str, ...], ...] = (
    ("$root", "object"),
    ("$root", "entry"),
    ("$entry", "changes"),
    ("$change", "field"),
    ("$change", "value"),
    ("$value", "metadata"),
    ("$value", "metadata", "phone_number_id"),
    ("$value", "contacts"),
    ("$value", "messages"),
    ("$value", "statuses"),
    ("$contact", "wa_id"),
    ("$contact", "profile"),
    ("$msg", "from"),
    ("$msg", "id"),
    ("$msg", "timestamp"),
    ("$msg", "type"),
    ("$msg", "text"),
    ("$msg", "context"),
)

whatsapp_mutations = st.lists(
    st.tuples(
        st.sampled_from(_WHATSAPP_PATHS),
        st.one_of(
            st.just(DROP),
            odd_values,
            fuzz_text,
            st.sampled_from(["9" * 30, "-1", "1e10", "99999999999999999999", "text", "system"]),
            st.lists(
                st.fixed_dictionaries(
                    {
                        "id": st.one_of(fuzz_text, odd_values),
                        "status": st.sampled_from(["sent", "failed", "x"]),
                    }
                ),
                max_size=2,
            ),
            # A message's context: forwarded (often), or replying to another.
            st.fixed_dictionaries(
                {},
                optional={
                    "forwarded": json_scalars,
                    "frequently_forwarded": json_scalars,
                    "id": st.one_of(fuzz_text, odd_values),
                    "from": fuzz_text,
                },
            ),
        ),
    ),
    min_size=1,
    max_size=3,
).map(tuple)


@st.composite
def whatsapp_cases(draw: st.DrawFn) -> WhatsAppCase:
    return WhatsAppCase(
        kind=draw(
            st.sampled_from(["text", "text", "text", "button", "interactive", "image", "reaction"])
        ),
        text=draw(message_texts(4096)),
        name=draw(st.one_of(plain_text, fuzz_text)),
        mutations=draw(st.one_of(st.just(()), st.just(()), whatsapp_mutations)),
    )


def payload_bytes(payload: dict[str, Any], ascii_only: bool) -> bytes:
    """An update as a platform serialises it (Telegram and Meta escape non-ASCII)."""
    if not ascii_only and not has_surrogate(json.dumps(payload, ensure_ascii=False)):
        return json.dumps(payload, ensure_ascii=False).encode()
    return json.dumps(payload).encode()
