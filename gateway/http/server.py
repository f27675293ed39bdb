"""The HTTP server's limits: how long a client may take and how large a frame may be.

uvicorn closes idle keep-alive connections, but waits forever for the headers of a
request that has begun; a client sending one byte a minute would hold a connection for
good. The protocol here closes a connection whose request headers are not complete
within `PARLEY_READ_TIMEOUT_SECONDS`; `gateway.limits.BodyLimit` does the same for the
body. A reverse proxy in front should still set its own (nginx `client_header_timeout`,
`client_body_timeout`), as it sees slow clients before Parley does.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from gateway.http.keepalive import keepalive_protocol
from gateway.settings import Settings

# Socket frames past the body limit get an `error` frame from the app; frames past this
# multiple of it are cut off by the server itself (close code 1009).
FRAME_HARD_LIMIT_FACTOR = 4


def server_config(app: Any, settings: Settings, *, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        # Our logging (gateway.logs) sets the levels and formats uvicorn's lines (a level
        # here would undo its cap on uvicorn.error, where socket frames are written at
        # debug); our access line replaces uvicorn's.
        log_level=None,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
        http=header_deadline_protocol(settings.read_timeout_seconds),
        # uvicorn's sans-I/O WebSockets, pinged from one timer (`keepalive`).
        ws=keepalive_protocol(),
        ws_max_size=settings.max_body_bytes * FRAME_HARD_LIMIT_FACTOR,
        # No permessage-deflate: its zlib state (kept for the socket's life, used or not)
        # was some 50 KB of the ~88 KB an idle web chat socket cost (bench.idle_sockets),
        # for frames that are short JSON. Clients that offer it simply do without.
        ws_per_message_deflate=False,
        ws_ping_interval=settings.websocket_ping_seconds,
        # Sockets are told to close at once, and requests are short; this only bounds a
        # connection that hangs on regardless, so that stopping never waits forever.
        timeout_graceful_shutdown=math.ceil(settings.shutdown_seconds),
    )


def header_deadline_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, closing connections that are slow to send headers."""

    # uvicorn picks httptools or h11 at import; both keep the request in `cycle`.
    class HeaderDeadline(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and not self._in_request():
                self._arm()
            super().data_received(data)
            if self._in_request():
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _in_request(self) -> bool:
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(seconds, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            # A WebSocket upgrade hands the transport to another protocol: not ours.
            if self.transport.get_protocol() is self and not self._in_request():
                self.transport.close()

    return HeaderDeadline
