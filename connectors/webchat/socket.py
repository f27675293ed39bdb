"""The web chat WebSocket: send messages, stream replies, resume after a reconnect.

Server frames for stored messages go out in seq order with no gaps once the client
has said where it stands (`resume`): a live message that does not follow the last
one sent makes the socket catch up from the database first.

A socket lasts as long as the token it was opened with: when a site's identified
visitor's token runs out, the socket says so (`expired`) and is closed, and nothing
that comes after is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import ValidationError
from starlette.types import Message
from starlette.websockets import WebSocketState

from connectors.webchat.schema import AuthFrame, ClientFrame, ResumeFrame, SeenFrame
from connectors.webchat.tokens import EXPIRED
from connectors.webchat.visitors import Visitor, Visitors
from gateway.sdk import (
    MAX_INT64,
    QUEUE_LIMIT,
    AccessRefused,
    AuthError,
    DeltaEvent,
    Ended,
    Event,
    InputError,
    MessageEvent,
    MessageOut,
    Overflow,
    RateLimited,
    SignInExpired,
    Stored,
    StoredMessage,
    Typing,
    validation_errors,
)

CATCH_UP_PAGE = 200
# A resume asking for only the recent messages still gets every unread one, this far back:
# the launcher's unread count is then right for any absence shorter than that.
UNREAD_WINDOW = 500
# How long a socket opened without `?token=` has to send its `auth` frame.
AUTH_WAIT_SECONDS = 10
# Close codes: the 4000s mirror the HTTP status a request would have got.
UNAUTHORIZED = 4401
GONE = 4410
TOO_MANY = 4429


class _Outbox:
    """Everything the server sends, in order, through one lock."""

    def __init__(self, websocket: WebSocket, visitors: Visitors, visitor: Visitor) -> None:
        self._ws = websocket
        self._core = visitors.core
        self._conversation = visitor.identity.conversation_id
        self._identity = visitor.identity
        self._lock = asyncio.Lock()
        self._sent_seq: int | None = None

    async def frame(self, payload: dict[str, Any]) -> None:
        async with self._lock:
            await self._send(payload)

    async def error(self, code: str, detail: str, **extra: Any) -> None:
        await self.frame({"type": "error", "code": code, "detail": detail, **extra})

    async def last(self, payload: dict[str, Any], code: int) -> None:
        """Send `payload`, then close the socket with `code`."""
        async with self._lock:
            await self._close(payload, code)

    async def _close(self, payload: dict[str, Any], code: int) -> None:
        await self._send(payload)
        await self._ws.close(code=code)

    async def resume(self, after_seq: int, recent: int | None = None) -> None:
        async with self._lock:
            self._sent_seq = after_seq
            if recent is not None:
                for message in await self._window(after_seq, recent):
                    await self._send_message(message)
            await self._catch_up()  # what came meanwhile, or all after `after_seq`

    async def _window(self, after_seq: int, recent: int) -> list[StoredMessage]:
        """The newest `recent` messages and, before them, every one not yet read (up to
        UNREAD_WINDOW in all); nothing up to `after_seq`. Oldest first, without gaps."""
        newest = await self._core.earlier(self._conversation, MAX_INT64, recent)
        if not newest:
            return []
        # What the client holds, or the person has read (on any device).
        had_up_to = max(after_seq, await self._core.seen(self._identity))
        older: list[StoredMessage] = []
        if had_up_to < newest[0].seq - 1:
            # The run just before the newest, unread: a suffix, so no gap before them.
            before = await self._core.earlier(
                self._conversation, newest[0].seq, UNREAD_WINDOW - recent
            )
            older = [m for m in before if m.seq > had_up_to]
        return older + [m for m in newest if m.seq > after_seq]

    async def event(self, event: Event) -> None:
        async with self._lock:
            if isinstance(event, DeltaEvent):
                await self._send({"type": "delta", "text": event.text})
            elif isinstance(event, Typing):
                await self._send({"type": "typing"})
            elif isinstance(event, MessageEvent):
                await self._message(event.message)
            elif isinstance(event, Stored):
                await self._stored(event.seq)
            elif isinstance(event, Overflow) and self._sent_seq is not None:
                await self._catch_up()
            elif isinstance(event, Ended):
                # Its seqs mean nothing now: the client's next connection starts afresh.
                await self._close({"type": "ended", "text": event.notice}, GONE)

    async def _message(self, message: StoredMessage) -> None:
        if self._sent_seq is not None:
            if message.seq <= self._sent_seq:
                return
            if message.seq != self._sent_seq + 1:
                await self._catch_up()
                return
        await self._send_message(message)

    async def _stored(self, seq: int) -> None:
        """Another replica stored message `seq`: read it (and any gap) from the database."""
        if self._sent_seq is None:
            for message in await self._core.history(self._conversation, seq - 1, 1):
                await self._send_message(message)
        elif seq > self._sent_seq:
            await self._catch_up()

    async def _catch_up(self) -> None:
        assert self._sent_seq is not None
        while True:
            batch = await self._core.history(self._conversation, self._sent_seq, CATCH_UP_PAGE)
            for message in batch:
                await self._send_message(message)
            if len(batch) < CATCH_UP_PAGE:
                return

    async def _send_message(self, message: StoredMessage) -> None:
        files = await self._core.files_of([message])  # no query for a message without
        shown = MessageOut.of(message, files.get(message.id, ()))
        await self._send({"type": "message", **shown.model_dump(mode="json")})
        self._sent_seq = message.seq

    async def _send(self, payload: dict[str, Any]) -> None:
        # A send that found the client gone marks the socket closed, and Starlette refuses
        # any later one with a RuntimeError: to the sender it is the same disconnect.
        if self._ws.application_state is WebSocketState.DISCONNECTED:
            raise WebSocketDisconnect(code=1006)
        await self._ws.send_json(payload)


async def serve_socket(websocket: WebSocket, visitors: Visitors, token: str | None) -> None:
    """`token`: from `?token=` (older clients); None: the first frame carries it."""
    await websocket.accept()
    try:
        visitor = await visitors.visitor(await _auth_frame(websocket) if token is None else token)
    except WebSocketDisconnect:
        return
    except AuthError as exc:
        # An expired sign-in is the site's to renew: the client asks it, not for a session.
        code = "expired" if isinstance(exc, SignInExpired) else "unauthorized"
        await websocket.send_json({"type": "error", "code": code, "detail": str(exc)})
        await websocket.close(code=UNAUTHORIZED)
        return
    try:
        visitors.sockets.acquire(visitor.id)
    except RateLimited as exc:
        await websocket.send_json(_limited(exc))
        await websocket.close(code=TOO_MANY)
        return
    try:
        await _converse(websocket, visitors, visitor)
    finally:
        visitors.sockets.release(visitor.id)


async def _auth_frame(websocket: WebSocket) -> str:
    """The token of the socket's first frame, `{"type": "auth", "token": ...}`."""
    try:
        async with asyncio.timeout(AUTH_WAIT_SECONDS):
            message = await websocket.receive()
    except TimeoutError:
        raise AuthError(f"no auth frame within {AUTH_WAIT_SECONDS} s") from None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    try:
        return AuthFrame.model_validate_json(message.get("text") or "").token
    except ValidationError:
        raise AuthError(
            'the first frame must be {"type": "auth", "token": "<web chat token>"}'
        ) from None


class Inbox:
    """The socket's events from the hub, sent on in order by a task that runs only
    while some wait, so that an idle socket keeps no task, queue or future: eleven
    objects fewer a socket for every full garbage collection to walk (bench/README.md,
    "Idle web chat sockets")."""

    __slots__ = ("_events", "_send_one", "_sending")

    def __init__(self, send: Callable[[Event], Awaitable[None]]) -> None:
        self._send_one = send
        self._events: deque[Event] = deque()
        self._sending: asyncio.Task[None] | None = None

    def put_nowait(self, item: Event) -> None:
        if len(self._events) >= QUEUE_LIMIT:
            raise asyncio.QueueFull
        self._events.append(item)
        if self._sending is None:
            self._sending = asyncio.create_task(self._send())

    def get_nowait(self) -> Event:
        return self._events.popleft()

    def empty(self) -> bool:
        return not self._events

    async def _send(self) -> None:
        while self._events:
            await self._send_one(self._events.popleft())
        # Reached only with none left: a failed send keeps its task, and what comes after
        # it waits there (the socket is going: it ends with `close`).
        self._sending = None

    async def close(self) -> None:
        """Stop sending; a send that failed (the client gone) is not an error here."""
        if self._sending is None:
            return
        self._sending.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
            await self._sending


async def _converse(websocket: WebSocket, visitors: Visitors, visitor: Visitor) -> None:
    outbox = _Outbox(websocket, visitors, visitor)
    max_bytes = visitors.settings.max_body_bytes
    seen = await visitors.core.seen(visitor.identity)
    inbox = Inbox(outbox.event)
    with visitors.core.events(visitor.identity.conversation_id, inbox):
        try:
            # Where this person stopped reading, on any device: the client's unread count.
            await outbox.frame({"type": "ready", "seen_seq": seen})
            while True:
                message = await _receive(websocket, visitors, visitor)
                if message is None:
                    await outbox.last(_expired(), UNAUTHORIZED)
                    return
                if message["type"] == "websocket.disconnect":
                    return
                raw = message.get("text")
                if raw is None:
                    await outbox.error(
                        "bad_frame", "binary frames are not supported: send JSON text"
                    )
                elif _larger_than(raw, max_bytes):
                    await outbox.error("too_large", f"frame is larger than {max_bytes} bytes")
                else:
                    await _handle(raw, visitors, visitor, outbox)
        except WebSocketDisconnect:
            pass
        finally:
            await inbox.close()


async def _receive(websocket: WebSocket, visitors: Visitors, visitor: Visitor) -> Message | None:
    """The client's next message while the visitor's token works; None once it has run
    out, at that moment, and for a frame that came too late."""
    while True:
        left = visitors.seconds_left(visitor)
        if left is not None and left <= 0:
            return None
        # Checked again on waking: the timer and the clock may disagree by a little.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                message = await websocket.receive()
            left = visitors.seconds_left(visitor)
            return message if left is None or left > 0 else None


async def _handle(raw: str, visitors: Visitors, visitor: Visitor, outbox: _Outbox) -> None:
    try:
        frame = ClientFrame.validate_json(raw)
    except ValidationError as exc:
        await outbox.error("bad_frame", _reason(exc))
        return
    if isinstance(frame, ResumeFrame):
        await outbox.resume(frame.after_seq, frame.recent)
        return
    if isinstance(frame, SeenFrame):
        await visitors.core.mark_seen(visitor.identity, frame.seq)
        return
    client_id = frame.client_id
    try:
        received = await visitors.submit(
            visitor.id, frame.text, client_id, tuple(frame.attachments)
        )
    except AccessRefused as refused:
        # Nothing was stored: the answer (a pairing code, a refusal) is all there is.
        await outbox.error("refused", refused.answer, client_id=client_id)
    except RateLimited as exc:
        await outbox.frame(_limited(exc) | {"client_id": client_id})
    except InputError as exc:
        await outbox.error("bad_message", str(exc), client_id=client_id)
    else:
        await outbox.frame({"type": "ack", "client_id": client_id, "seq": received.message.seq})


def _larger_than(text: str, max_bytes: int) -> bool:
    """Is `text` over `max_bytes` in UTF-8? A character is 1 to 4 bytes, so most frames
    are judged by their length alone, without encoding them."""
    if len(text) > max_bytes:
        return True
    if len(text) * 4 <= max_bytes:
        return False
    return len(text.encode("utf-8", "replace")) > max_bytes


def _expired() -> dict[str, Any]:
    return {"type": "error", "code": "expired", "detail": EXPIRED}


def _limited(exc: RateLimited) -> dict[str, Any]:
    return {
        "type": "error",
        "code": "rate_limited",
        "detail": exc.detail,
        "retry_after": math.ceil(exc.retry_after),
    }


def _reason(exc: ValidationError) -> str:
    errors = validation_errors(exc.errors())
    if not errors:
        return "frame is not valid"
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]
