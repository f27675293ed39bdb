"""A fake language-model server speaking the OpenAI and Anthropic wire formats.

It listens on a real localhost socket and streams real server-sent events, so providers
are tested through the same HTTP stack they use in production. Tests script what each
request gets (`Reply`, `CallTools`, `Fail`, `Hang`, `FailMidStream`); unscripted
requests get `Reply(f"reply {k}")`. Like the Messages API, the Anthropic side refuses
(HTTP 400) tool blocks in a request that declares no tools.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from itertools import chain, zip_longest
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.support.servers import serve


@dataclass
class Reply:
    text: str
    pieces: int = 3
    gate: asyncio.Event | None = None  # the reply waits until the test sets it
    cached: int = 0  # prompt tokens the usage reports as read from a prompt cache
    # OpenAI: after the finishing chunk send no usage and no `[DONE]`, and hold the
    # connection open (a compatible server that never ends its stream).
    hold_open: bool = False
    # Send the whole reply, its end marker too, and then hold the connection open.
    hold_after_end: bool = False
    # Stream the first half of the reply, then wait until the test sets it.
    midway: asyncio.Event | None = None
    # Seconds between two frames: a model that writes slowly.
    pace: float = 0.0


@dataclass
class Fail:
    status: int
    retry_after: float | None = None
    message: str = "fake failure"


@dataclass
class Hang:
    """Accept the request and never answer: the client must time out."""


@dataclass
class FailMidStream:
    """Stream `text`, then the platform's in-stream error (an overload) instead of an end."""

    text: str
    message: str = "fake overload"


@dataclass
class CallTools:
    """Stream `text` (if any), then ask for each of `calls`, a (name, arguments) pair: a
    dict is sent as JSON, a str as it is (so it may be invalid). Each call's arguments
    come in `pieces` and its id is `call_<request number>_<i>`, i from 0."""

    calls: list[tuple[str, dict[str, Any] | str]]
    text: str = ""
    pieces: int = 3
    # OpenAI only: send the calls' argument pieces in turns, not one call after another
    # (the index in each piece says whose it is).
    interleave: bool = False
    # End the response in the last call's arguments (before its last piece: give it two
    # or more), with no end marker.
    break_off: bool = False


@dataclass(frozen=True)
class _Call:
    """A call as a wire streams it."""

    id: str
    name: str
    pieces: list[str]


Behaviour = Reply | CallTools | Fail | Hang | FailMidStream


class FakeLLM:
    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.active = 0
        self.max_active = 0
        # The client's end of every connection a request came on (host, port).
        self.connections: set[tuple[str, int]] = set()
        self._script: deque[Behaviour] = deque()
        # Consulted before the script: picks a behaviour by request body and number.
        self.responder: Callable[[dict[str, Any], int], Behaviour | None] | None = None
        self._arrivals = asyncio.Condition()
        self._closing = asyncio.Event()
        # Speech to text: what each request sent (its form fields, the file's name, type
        # and bytes), and what the next ones answer (a transcript, or a failure).
        self.transcriptions: list[dict[str, Any]] = []
        self.transcripts: deque[str | Fail] = deque()
        routes = [
            Route("/v1/chat/completions", self._openai, methods=["POST"]),
            Route("/v1/messages", self._anthropic, methods=["POST"]),
            Route("/v1/audio/transcriptions", self._transcribe, methods=["POST"]),
        ]
        self.app: ASGIApp = _InFlight(self, Starlette(routes=routes))

    @property
    def openai_base(self) -> str:
        return f"{self.base_url}/v1"

    def settings(self) -> dict[str, str]:
        """The settings that point a gateway at this model (OpenAI's wire format)."""
        return {
            "llm_provider": "openai",
            "llm_base_url": self.openai_base,
            "llm_api_key": "sk-test-key-that-must-not-leak",
            "llm_model": "fake-model",
        }

    def script(self, *behaviours: Behaviour) -> None:
        self._script.extend(behaviours)

    # The timeout parameter is the agreed API for pipeline tests, hence the noqa.
    async def wait_for_requests(self, n: int, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout), self._arrivals:
                await self._arrivals.wait_for(lambda: len(self.requests) >= n)
        except TimeoutError:
            raise TimeoutError(f"expected {n} requests, got {len(self.requests)}") from None

    async def wait_until(
        self, condition: Callable[[list[dict[str, Any]]], bool], seconds: float = 10.0
    ) -> None:
        """Wait until the requests received so far satisfy `condition`."""
        async with asyncio.timeout(seconds), self._arrivals:
            await self._arrivals.wait_for(lambda: condition(self.requests))

    async def _openai(self, request: Request) -> Response:
        behaviour, number, body = await self._arrive(request)
        return await self._respond(behaviour, _OpenAIWire(str(body.get("model")), number))

    async def _anthropic(self, request: Request) -> Response:
        behaviour, number, body = await self._arrive(request, _anthropic_refusal)
        return await self._respond(behaviour, _AnthropicWire(str(body.get("model")), number))

    async def _arrive(
        self, request: Request, refusal: Callable[[dict[str, Any]], str | None] | None = None
    ) -> tuple[Behaviour, int, dict[str, Any]]:
        body: dict[str, Any] = await request.json()
        async with self._arrivals:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            number = len(self.requests)
            refused = refusal(body) if refusal else None
            chosen = self.responder(body, number) if self.responder and not refused else None
            if refused is not None:
                behaviour: Behaviour = Fail(400, message=refused)
            elif chosen is not None:
                behaviour = chosen
            elif self._script:
                behaviour = self._script.popleft()
            else:
                behaviour = Reply(f"reply {number}")
            self._arrivals.notify_all()
        return behaviour, number, body

    async def _respond(self, behaviour: Behaviour, wire: _Wire) -> Response:
        match behaviour:
            case Fail(status, retry_after, message):
                headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
                return JSONResponse(wire.error(status, message), status, headers=headers)
            case Hang():
                await self._closing.wait()
                return Response(status_code=503)
            case Reply(text, pieces, gate, cached, hold_open, hold_after_end, midway, pace):
                if gate is not None:
                    await self._until(gate)
                frames = wire.reply(_split(text, pieces), cached)
                if hold_open:
                    return _event_stream(frames[:-2], hold=self._closing)
                if hold_after_end:
                    return _event_stream(frames, hold=self._closing)
                if midway is not None:
                    half = len(frames) // 2
                    return _event_stream(
                        frames[:half], then=frames[half:], after=partial(self._until, midway)
                    )
                return _event_stream(frames, pace=pace)
            case FailMidStream(text, message):
                return _event_stream(wire.broken(_split(text, 1), message))
            case CallTools(calls, text, pieces, interleave, break_off):
                wanted = [
                    _Call(f"call_{wire.number}_{i}", name, _split(_arguments(args), pieces))
                    for i, (name, args) in enumerate(calls)
                ]
                frames = wire.calls(_split(text, pieces), wanted, interleave=interleave)
                return _event_stream(wire.cut(frames) if break_off else frames)

    async def _transcribe(self, request: Request) -> Response:
        """OpenAI's `/audio/transcriptions`: multipart `file` and `model`, `{"text"}` back."""
        async with request.form() as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                return JSONResponse({"error": {"message": "file is required"}}, 400)
            self.transcriptions.append(
                {
                    "model": form.get("model"),
                    "file_name": upload.filename,
                    "mime": upload.content_type,
                    "data": await upload.read(),
                    "authorization": request.headers.get("authorization"),
                }
            )
        answer = self.transcripts.popleft() if self.transcripts else "hello from a voice note"
        if isinstance(answer, Fail):
            return JSONResponse({"error": {"message": answer.message}}, answer.status)
        return JSONResponse({"text": answer})

    async def _until(self, gate: asyncio.Event) -> None:
        # Also wake on close, so a test that never opens its gate cannot stall shutdown.
        waiters = {asyncio.ensure_future(gate.wait()), asyncio.ensure_future(self._closing.wait())}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _release(self) -> None:
        self._closing.set()


class _InFlight:
    """Counts a request as active from arrival until the last byte of its response is sent."""

    def __init__(self, fake: FakeLLM, app: ASGIApp) -> None:
        self._fake = fake
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        fake = self._fake
        if scope.get("client"):
            fake.connections.add(tuple(scope["client"]))
        fake.active += 1
        fake.max_active = max(fake.max_active, fake.active)
        finished = False

        async def send_and_count(message: Message) -> None:
            nonlocal finished
            await send(message)
            if _is_last_body(message) and not finished:
                finished = True
                fake.active -= 1

        try:
            await self._app(scope, receive, send_and_count)
        finally:
            if not finished:
                fake.active -= 1


def _is_last_body(message: Message) -> bool:
    return message["type"] == "http.response.body" and not message.get("more_body", False)


class _Wire(Protocol):
    number: int

    def reply(self, pieces: list[str], cached: int = 0) -> list[str]: ...
    def calls(self, text: list[str], calls: list[_Call], *, interleave: bool) -> list[str]: ...
    def cut(self, frames: list[str]) -> list[str]:
        """`calls` frames cut short in the last call's arguments."""
        ...

    def broken(self, pieces: list[str], message: str) -> list[str]: ...
    def error(self, status: int, message: str) -> dict[str, Any]: ...


@dataclass
class _OpenAIWire:
    model: str
    number: int

    def reply(self, pieces: list[str], cached: int = 0) -> list[str]:
        return [*self._text(pieces), *self._end("stop", len(pieces), cached)]

    def calls(self, text: list[str], calls: list[_Call], *, interleave: bool) -> list[str]:
        streams = [self._call(index, call) for index, call in enumerate(calls)]
        ordered = _round_robin(streams) if interleave else chain.from_iterable(streams)
        return [*self._text(text), *ordered, *self._end("tool_calls", _tokens(text, calls))]

    def cut(self, frames: list[str]) -> list[str]:
        # The finishing chunk, the usage, `[DONE]` and the last argument piece.
        return frames[:-4]

    def broken(self, pieces: list[str], message: str) -> list[str]:
        return [*self._text(pieces), _data(self.error(503, message))]

    def _call(self, index: int, call: _Call) -> list[str]:
        # Like OpenAI: the first piece names the call, the rest add to its arguments.
        first, *rest = call.pieces or [""]
        function = {"name": call.name, "arguments": first}
        opening = {"index": index, "id": call.id, "type": "function", "function": function}
        later = ({"index": index, "function": {"arguments": piece}} for piece in rest)
        return [self._chunk({"tool_calls": [piece]}) for piece in (opening, *later)]

    def _end(self, finish_reason: str, completion: int, cached: int = 0) -> list[str]:
        usage = {
            "prompt_tokens": 10 + cached,
            "completion_tokens": completion,
            "total_tokens": 10 + cached + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        return [
            self._chunk({}, finish_reason=finish_reason),
            _data({**self._envelope(), "choices": [], "usage": usage}),
            "data: [DONE]\n\n",
        ]

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def _text(self, pieces: list[str]) -> list[str]:
        opening = self._chunk({"role": "assistant", "content": ""})
        return [opening, *(self._chunk({"content": piece}) for piece in pieces)]

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return _data({**self._envelope(), "choices": [choice]})

    def _envelope(self) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake-{self.number}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
        }


def _anthropic_refusal(body: dict[str, Any]) -> str | None:
    """What the Messages API says to a request it refuses that a test may send: tool
    blocks without the tools declared."""
    if body.get("tools"):
        return None
    for message in body.get("messages", []):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if any(block.get("type") in ("tool_use", "tool_result") for block in blocks):
            return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass
class _AnthropicWire:
    model: str
    number: int

    def reply(self, pieces: list[str], cached: int = 0) -> list[str]:
        return [*self._text(pieces, cached), _block_stop(0), *self._end("end_turn", len(pieces))]

    def calls(self, text: list[str], calls: list[_Call], *, interleave: bool) -> list[str]:
        # Content blocks never overlap on this wire: `interleave` cannot apply.
        del interleave
        if text:
            frames = [*self._text(text), _block_stop(0)]
        else:
            frames = [_event({"type": "message_start", "message": self._message()})]
        first = 1 if text else 0
        for offset, call in enumerate(calls):
            frames += self._tool_block(first + offset, call)
        return [*frames, *self._end("tool_use", _tokens(text, calls))]

    def cut(self, frames: list[str]) -> list[str]:
        # The message's end, the last block's stop and its last argument piece.
        return frames[:-4]

    def broken(self, pieces: list[str], message: str) -> list[str]:
        return [*self._text(pieces), _event(self.error(529, message))]

    def _tool_block(self, index: int, call: _Call) -> list[str]:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        start = {"type": "content_block_start", "index": index, "content_block": block}
        deltas = (
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in call.pieces
        )
        return [_event(start), *(_event(delta) for delta in deltas), _block_stop(index)]

    def _end(self, stop_reason: str, output_tokens: int) -> list[str]:
        return [
            _event(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                }
            ),
            _event({"type": "message_stop"}),
        ]

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _text(self, pieces: list[str], cached: int = 0) -> list[str]:
        deltas = (
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
            for p in pieces
        )
        return [
            _event({"type": "message_start", "message": self._message(cached)}),
            _event(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                }
            ),
            _event({"type": "ping"}),
            *(_event(delta) for delta in deltas),
        ]

    def _message(self, cached: int = 0) -> dict[str, Any]:
        return {
            "id": f"msg_fake_{self.number}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
            },
        }


def _block_stop(index: int) -> str:
    return _event({"type": "content_block_stop", "index": index})


def _tokens(text: list[str], calls: list[_Call]) -> int:
    """What the usage counts: a token per piece."""
    return len(text) + sum(len(call.pieces) for call in calls)


def _arguments(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _round_robin(streams: Iterable[list[str]]) -> list[str]:
    """The first frame of each stream, then the second of each, and so on."""
    rounds = zip_longest(*streams)
    return [frame for frames in rounds for frame in frames if frame is not None]


def _data(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _event(payload: dict[str, Any]) -> str:
    return f"event: {payload['type']}\n{_data(payload)}"


def _event_stream(
    frames: list[str],
    hold: asyncio.Event | None = None,
    *,
    then: Sequence[str] = (),
    after: Callable[[], Awaitable[None]] | None = None,
    pace: float = 0.0,
) -> StreamingResponse:
    """`frames`, `pace` seconds apart; with `after`, once it is done, `then` as well."""

    async def body() -> AsyncIterator[str]:
        for number, frame in enumerate(frames):
            if pace and number:
                await asyncio.sleep(pace)
            yield frame
        if after is not None:
            await after()
            for frame in then:
                yield frame
        if hold is not None:
            await hold.wait()

    return StreamingResponse(body(), media_type="text/event-stream")


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = -(-len(text) // max(pieces, 1))
    return [text[start : start + size] for start in range(0, len(text), size)]


@asynccontextmanager
async def fake_llm() -> AsyncIterator[FakeLLM]:
    fake = FakeLLM()
    async with serve(fake.app) as url:
        fake.base_url = url
        try:
            yield fake
        finally:
            fake._release()  # lets hanging requests end so the server can shut down
