"""WebSocket keep-alive: every socket pinged at its interval, from one timer for all."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.uri import parse_uri

from gateway.http.keepalive import PingWheel, SharedKeepalive, keepalive_protocol
from tests.support.polling import eventually
from tests.support.servers import serve

DEADLINE_SECONDS = 10.0


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An ASGI app that accepts a socket and sends back each text frame."""
    assert scope["type"] == "websocket"
    await receive()
    await send({"type": "websocket.accept"})
    while (message := await receive())["type"] != "websocket.disconnect":
        await send({"type": "websocket.send", "text": message.get("text")})


class RawClient:
    """A WebSocket client that shows every frame it gets, pings included, and answers
    them (with websockets' automatic pong) only if `answers`."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answers: bool
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.answers = answers
        self.protocol: ClientProtocol | None = None
        self._events: collections.deque[Frame | Request | Response] = collections.deque()

    @classmethod
    async def open(cls, url: str, *, answers: bool = True) -> RawClient:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        client = cls(reader, writer, answers)
        client.protocol = ClientProtocol(parse_uri(url.replace("http", "ws", 1)))
        client.protocol.send_request(client.protocol.connect())
        writer.write(b"".join(client.protocol.data_to_send()))
        response = await client.event()
        assert isinstance(response, Response)
        assert response.status_code == 101
        return client

    async def event(self) -> Frame | Request | Response | None:
        """The next frame (or the handshake's response); None once the server closed."""
        assert self.protocol is not None
        while not self._events:
            data = await self.reader.read(65536)
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            self._events.extend(self.protocol.events_received())
            outgoing = b"".join(self.protocol.data_to_send())
            if self.answers and outgoing:
                self.writer.write(outgoing)
            if not data and not self._events:
                return None
        return self._events.popleft()

    async def frame(self) -> Frame | None:
        event = await self.event()
        assert event is None or isinstance(event, Frame)
        return event

    async def echo(self, text: str) -> str:
        assert self.protocol is not None
        self.protocol.send_text(text.encode())
        self.writer.write(b"".join(self.protocol.data_to_send()))
        while (frame := await self.frame()) is not None and frame.opcode is not Opcode.TEXT:
            pass
        assert frame is not None
        return bytes(frame.data).decode()

    def close(self) -> None:
        self.writer.close()


@contextlib.asynccontextmanager
async def pinging(
    protocol: type[SharedKeepalive], interval: float, pong_seconds: float
) -> AsyncIterator[str]:
    async with serve(
        echo, ws=protocol, ws_ping_interval=interval, ws_ping_timeout=pong_seconds
    ) as url:
        yield url + "/socket"


async def test_a_socket_that_answers_is_pinged_at_each_interval_and_stays_open() -> None:
    async with pinging(keepalive_protocol(), interval=0.3, pong_seconds=5.0) as url:
        client = await RawClient.open(url)
        pings: list[tuple[float, bytes]] = []
        async with asyncio.timeout(DEADLINE_SECONDS):
            while len(pings) < 3:
                frame = await client.frame()
                assert frame is not None, "the server closed an answering socket"
                if frame.opcode is Opcode.PING:
                    pings.append((time.monotonic(), bytes(frame.data)))
            echoed = await client.echo("still here")
        client.close()

    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(pings)]
    assert all(gap >= 0.2 for gap in gaps), gaps  # at the interval, not as fast as answered
    assert len({payload for _, payload in pings}) == 3
    assert echoed == "still here"


async def test_a_socket_that_never_answers_a_ping_is_closed_after_the_timeout() -> None:
    async with pinging(keepalive_protocol(), interval=0.2, pong_seconds=0.3) as url:
        client = await RawClient.open(url, answers=False)
        async with asyncio.timeout(DEADLINE_SECONDS):
            frames = []
            while (frame := await client.frame()) is not None:
                frames.append(frame)
        client.close()

    assert [frame.opcode for frame in frames] == [Opcode.PING, Opcode.CLOSE]
    assert Close.parse(frames[1].data).code == 1011


async def test_idle_sockets_wait_for_their_pings_on_one_timer() -> None:
    protocol = keepalive_protocol()
    async with pinging(protocol, interval=0.3, pong_seconds=5.0) as url:
        clients = [await RawClient.open(url) for _ in range(50)]

        async def pinged_twice(client: RawClient) -> None:
            seen = 0
            while seen < 2:
                frame = await client.frame()
                assert frame is not None
                seen += frame.opcode is Opcode.PING

        async with asyncio.timeout(DEADLINE_SECONDS):
            await asyncio.gather(*(pinged_twice(client) for client in clients))
        wheel = protocol._wheel
        assert wheel is not None
        # Timers armed for this server's sockets or its wheel (other tests' may linger).
        timers = [
            str(getattr(callback, "__name__", ""))
            for handle in gc.get_objects()
            # `type`, not `isinstance`: the heap holds weak proxies, some to the dead.
            if type(handle) is asyncio.TimerHandle and not handle.cancelled()
            for callback in [getattr(handle, "_callback", None)]
            if getattr(callback, "__self__", None) is wheel
            or isinstance(getattr(callback, "__self__", None), protocol)
        ]
        waiting = wheel.held
        for client in clients:
            client.close()
        await eventually(_held_by(wheel), until=lambda held: held == 0)

    # uvicorn's own keep-alive holds a `send_keepalive_ping` timer a socket.
    assert "send_keepalive_ping" not in timers
    assert timers.count("_ping_due") == (1 if waiting else 0)
    # Every socket waits for its next ping, or for the pong of the last (uvicorn's).
    assert waiting + timers.count("keepalive_timeout") == len(clients)


def _held_by(wheel: PingWheel) -> Callable[[], Awaitable[int]]:
    async def held() -> int:
        return wheel.held

    return held
