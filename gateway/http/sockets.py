"""WebSocket endpoints served beside the router, not through it.

A socket lives for hours, and every layer a request passes through on its way to a route
(the router and its included routers, the exception handlers, the exit stacks,
dependency solving) stays alive for as long as it does: some 65 objects a
socket. The garbage collector walks every live object in a full collection, holding the
event loop meanwhile: 1.7 s at 10,000 sockets, when each kept some 200 (bench/README.md,
"Idle web chat sockets"). So a socket goes straight from the origin check
(`gateway.http.cors`) to its connector's endpoint.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from gateway.channels.port import SocketEndpoint


class SocketPaths:
    def __init__(self, app: ASGIApp, endpoints: Mapping[str, SocketEndpoint]) -> None:
        self._app = app
        self._endpoints = dict(endpoints)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine itself: it hands on the callee's, so no frame of its own is
        # kept for the socket's life.
        if scope["type"] == "websocket":
            endpoint = self._endpoints.get(scope["path"])
            if endpoint is not None:
                return endpoint(WebSocket(scope, receive, send))
        return self._app(scope, receive, send)
