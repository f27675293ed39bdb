"""Streaming over HTTP with bounded retries, shared by the HTTP model providers.

A provider describes one call (`StreamRequest`) and how to read its server-sent events
(an `EventDecoder`); `stream_text` does the rest. Retries happen only before the first
piece is yielded, so a caller never sees text twice. The tool calls a reply asks for come
after its text, each whole, once the server has said the reply is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import aiohttp
import orjson

from gateway.backoff import full_jitter, parse_retry_after
from gateway.calls_out import client_session
from gateway.errors import LLMUnavailable
from gateway.llm.base import MAX_NAME_CHARS, Piece, Prompt, ToolCall, Usage, UsageSink

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
MAX_WAIT_SECONDS = 30.0
# After the reply's end marker, how long to read on for the usage a server sends after;
# and once all is read, for the end of the body (a server ends it at once).
TAIL_SECONDS = 2.0
DRAIN_SECONDS = 0.1
CONNECT_TIMEOUT_SECONDS = 10.0
REASON_DETAIL_CHARS = 200
_ERROR_BODY_BYTES = 8192

# Worth another try: the server may be back (time-outs are `TimeoutError`s too). Other
# client errors (a bad URL, a local protocol bug) would fail the same way again.
_TRANSIENT_ERRORS = (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)


class StreamFailed(Exception):
    """One attempt failed; `stream_text` decides whether to try again.

    `reason` is our own wording; `detail` is whatever the server or library said, which
    is untrusted: it is scrubbed of the API key and clipped before anyone sees it.
    """

    def __init__(
        self,
        reason: str,
        *,
        detail: str = "",
        retryable: bool,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail
        self.retryable = retryable
        self.retry_after = retry_after

    def describe(self, secret: str | None) -> str:
        detail = _clip(_redact(self.detail, secret))
        return f"{self.reason}: {detail}" if detail else self.reason


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str
    data: str


class EventDecoder(Protocol):
    """Turns one response's events into text and tool calls. A fresh decoder is made per
    attempt."""

    @property
    def complete(self) -> bool:
        """The server said the reply is complete: the stream may end now."""
        ...

    @property
    def finished(self) -> bool:
        """Nothing after this matters (the usage, if the server counts it, is read)."""
        ...

    @property
    def usage(self) -> Usage | None:
        """The tokens the call took, once the server said."""
        ...

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the reply asked for, in order; read once it is `complete`.
        Raises `StreamFailed` if one is malformed."""
        ...

    def feed(self, event: SSEEvent) -> str:
        """The text this event adds (often ""). Raises `StreamFailed` on an error event."""
        ...


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class CallAssembler:
    """Tool calls put together from the pieces a stream brings, keyed by the index the
    server gives each call (pieces of different calls may arrive in any order)."""

    def __init__(self) -> None:
        self._parts: dict[int, _PartialCall] = {}

    def __len__(self) -> int:
        return len(self._parts)

    def add(self, index: int, *, id: str = "", name: str = "", arguments: str = "") -> None:
        """Take a piece of call `index`: its id and name the first time they come (some
        servers repeat them), and whatever its arguments gain."""
        part = self._parts.setdefault(index, _PartialCall())
        part.id = part.id or id
        part.name = part.name or name
        if arguments:
            part.arguments.append(arguments)

    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(_whole(index, self._parts[index]) for index in sorted(self._parts))


def _whole(index: int, part: _PartialCall) -> ToolCall:
    if not part.name:
        # Nothing could run it, and it could not be shown to the model again.
        raise StreamFailed(f"tool call {index} came without a name", retryable=False)
    # A call without arguments is a call with none; some compatible servers leave out ids.
    arguments = "".join(part.arguments) or "{}"
    name = part.name[:MAX_NAME_CHARS]  # no tool is named longer: it stays unknown
    return ToolCall(id=part.id or f"call_{index}", name=name, arguments=arguments)


@dataclass(frozen=True, slots=True)
class StreamRequest:
    provider: str
    url: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    secret: str | None = field(default=None, repr=False)  # scrubbed from every reason


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int
    base_seconds: float

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt number `attempt` (0-based)."""
        if retry_after is not None:
            return min(retry_after, MAX_WAIT_SECONDS)
        return full_jitter(attempt + 1, self.base_seconds, MAX_WAIT_SECONDS)


class ModelClient:
    """The HTTP client of one provider (`gateway.calls_out`). Its session needs a
    running event loop, so it is opened on first use."""

    def __init__(self, url: str, timeout_seconds: float) -> None:
        self._url = url
        # `sock_read` bounds each wait for the next bytes, as a read timeout does; a
        # reply may stream for longer than that in all.
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT_SECONDS, sock_read=timeout_seconds
        )
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = client_session(self._url, self._timeout)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


async def stream_text(
    client: ModelClient,
    request: StreamRequest,
    decoder: Callable[[], EventDecoder],
    policy: RetryPolicy,
    on_usage: UsageSink | None = None,
) -> AsyncIterator[Piece]:
    """Yield the reply's text, then its tool calls; raise `LLMUnavailable` once retrying
    cannot help."""
    attempt = 0
    while True:
        attempt += 1
        yielded = False
        events = decoder()
        try:
            async with contextlib.aclosing(_attempt(client, request, events)) as pieces:
                async for piece in pieces:
                    yielded = True
                    yield piece
            if events.usage is not None:
                usage = replace(events.usage, model=str(request.body.get("model", "")))
                if on_usage is not None:
                    on_usage(usage)
                yield usage
            return
        except StreamFailed as failure:
            reason = failure.describe(request.secret)
            if yielded:
                reason = f"reply broke off after text had been sent: {reason}"
            if yielded or not failure.retryable or attempt > policy.max_retries:
                raise LLMUnavailable(reason, attempts=attempt) from None
            await asyncio.sleep(policy.delay(attempt - 1, failure.retry_after))


async def _attempt(
    client: ModelClient, request: StreamRequest, decoder: EventDecoder
) -> AsyncGenerator[Piece, None]:
    headers = {**request.headers, "Content-Type": "application/json"}
    try:
        async with client.session.post(
            request.url, headers=headers, data=_json_body(request.body)
        ) as response:
            if not response.ok:
                raise await _status_failure(request.provider, response)
            async for piece in _decode(response, decoder):
                yield piece
    except _TRANSIENT_ERRORS as exc:
        raise _transport_failure(request.provider, exc, retryable=True) from exc
    except aiohttp.ClientError as exc:
        raise _transport_failure(request.provider, exc, retryable=False) from exc


def _json_body(body: Mapping[str, Any]) -> bytes:
    return orjson.dumps(body, default=_mapping_as_dict)


def _mapping_as_dict(value: object) -> dict[str, Any]:
    # Tool schemas are declared as mappings; orjson writes objects only from dicts.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


async def _decode(response: aiohttp.ClientResponse, decoder: EventDecoder) -> AsyncIterator[Piece]:
    reader = SSEReader()
    lines = sse_lines(response.content.iter_any())
    async for text in _reply_text(lines, reader, decoder):
        yield text
    # The reply is whole, so every call's arguments are all read.
    for call in decoder.calls:
        yield call
    await _read_tail(lines, reader, decoder)


async def _reply_text(
    lines: AsyncIterator[str], reader: SSEReader, decoder: EventDecoder
) -> AsyncIterator[str]:
    """The text, up to the server's end marker."""
    async for line in lines:
        event = reader.feed(line)
        if event is None:
            continue
        if text := decoder.feed(event):
            yield text
        if decoder.complete:
            return
    # A cut connection can look like a clean end; only the server's end marker proves it.
    raise StreamFailed("stream ended before the reply was complete", retryable=True)


async def _read_tail(lines: AsyncIterator[str], reader: SSEReader, decoder: EventDecoder) -> None:
    """What follows the reply: its usage, if the server counts it, worth a short wait;
    then the rest of the body, so the connection serves the next call. One closed before
    its end is dropped, and every turn would pay for a new connection (with a real model,
    a TLS handshake)."""
    with contextlib.suppress(TimeoutError, aiohttp.ClientError, StreamFailed):
        async with asyncio.timeout(TAIL_SECONDS) as deadline:
            if decoder.finished:
                deadline.reschedule(asyncio.get_running_loop().time() + DRAIN_SECONDS)
            async for line in lines:
                if decoder.finished:
                    continue
                event = reader.feed(line)
                if event is not None:
                    decoder.feed(event)
                    if decoder.finished:
                        deadline.reschedule(asyncio.get_running_loop().time() + DRAIN_SECONDS)


async def sse_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of an event stream, without their endings (CR, LF or CRLF).

    A reply streams a few hundred events, each often a network read of its own: split
    on the bytes as they come, rather than through a text decoder and a line reader
    (two more steps a read). A line is whole before it is decoded, so no character is
    split: the stream is UTF-8 (https://html.spec.whatwg.org/#sse).
    """
    pending = b""
    async for chunk in chunks:
        pending += chunk
        # A CR at the end may be the first half of a CRLF: wait for what follows.
        cut = len(pending) - 1 if pending.endswith(b"\r") else len(pending)
        lines = pending[:cut].splitlines(keepends=True)
        pending = pending[cut:]
        if lines and not lines[-1].endswith((b"\n", b"\r")):
            pending = lines.pop() + pending  # a line still coming
        for line in lines:
            yield line.rstrip(b"\r\n").decode("utf-8", "replace")
    if pending:
        yield pending.rstrip(b"\r\n").decode("utf-8", "replace")


class SSEReader:
    """Assembles server-sent event lines into events (https://html.spec.whatwg.org/#sse)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SSEEvent | None:
        """Take one line; return an event when a blank line completes one."""
        if not line:
            return self._dispatch()
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        # Comments (": keep-alive"), `id:` and `retry:` carry nothing a reply needs.
        return None

    def _dispatch(self) -> SSEEvent | None:
        event = SSEEvent(self._event, "\n".join(self._data)) if self._data else None
        self._event, self._data = "", []
        return event


def parse_json(event: SSEEvent) -> dict[str, Any]:
    try:
        value = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        raise StreamFailed("malformed event data", detail=event.data, retryable=False) from None
    if not isinstance(value, dict):
        raise StreamFailed("unexpected event data", detail=event.data, retryable=False)
    return value


def error_message(payload: object) -> str | None:
    """The human message in either platform's `{"error": {"message": ...}}` shape."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return None


async def _status_failure(provider: str, response: aiohttp.ClientResponse) -> StreamFailed:
    status = response.status
    return StreamFailed(
        f"{provider} answered HTTP {status}",
        detail=_body_message(await _read_some(response)),
        retryable=status in RETRYABLE_STATUSES,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
    )


async def _read_some(response: aiohttp.ClientResponse) -> bytes:
    # An error page can be huge; the first few KiB hold the message.
    body = b""
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) >= _ERROR_BODY_BYTES:
            break
    return body[:_ERROR_BODY_BYTES]


def _body_message(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        message = error_message(json.loads(text))
    except ValueError:
        return text
    return message if message is not None else text


def _transport_failure(provider: str, exc: Exception, *, retryable: bool) -> StreamFailed:
    if isinstance(exc, TimeoutError):
        kind = "timed out"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        kind = "could not connect"
    else:
        kind = "request failed"
    return StreamFailed(
        f"{provider} {kind} ({type(exc).__name__})", detail=str(exc), retryable=retryable
    )


def _clip(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= REASON_DETAIL_CHARS:
        return text
    return text[: REASON_DETAIL_CHARS - 1] + "…"


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


class HTTPProvider:
    """What the HTTP providers share: one client, the retry policy and the stream loop.
    Subclasses say where to post, what to send and how to read the events."""

    name: str
    path: str
    decoder: Callable[[], EventDecoder]
    offers_tools = True  # both APIs stream tool calls

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float,
        max_retries: int,
        retry_base_seconds: float,
        sees_images: bool = True,
        on_usage: UsageSink | None = None,
    ) -> None:
        self._url = f"{base_url.rstrip('/')}{self.path}"
        self.sees_images = sees_images
        self._on_usage = on_usage
        self._api_key = api_key
        self.model = model
        self._policy = RetryPolicy(max_retries, retry_base_seconds)
        self._client = ModelClient(self._url, timeout)

    def stream(self, prompt: Prompt) -> AsyncIterator[Piece]:
        request = StreamRequest(
            self.name, self._url, self.headers(), self.body(prompt), self._api_key
        )
        return stream_text(self._client, request, self.decoder, self._policy, self._on_usage)

    async def aclose(self) -> None:
        await self._client.aclose()

    def headers(self) -> dict[str, str]:
        raise NotImplementedError

    def body(self, prompt: Prompt) -> dict[str, Any]:
        raise NotImplementedError

    def image_tokens(self, width: int, height: int) -> int:
        raise NotImplementedError
