"""Which origins' pages may use the web chat, and only it: Parley's own, and those in
PARLEY_WEBCHAT_ALLOWED_ORIGINS. Their scripts may call `/webchat/...` (CORS), and open
its socket: a browser sends the page's Origin with a WebSocket handshake but applies no
CORS to it, so the gateway refuses any other page's handshake itself (403). A client that
sends no Origin (an app, a script, `parley chat`) is no page and is let through, as over
HTTP, where the token decides.

The operator API never answers another origin's scripts: it is for servers and the
dashboard, which is served from Parley's own origin.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

WEBCHAT = "/webchat/"
# The close that refuses a handshake: servers answer it with a 403.
POLICY_VIOLATION = 1008
_HTTP_SCHEME = {"ws": "http", "wss": "https"}


def own_origin(connection: HTTPConnection) -> str:
    """The origin of Parley's own pages, as the browser names it for this request."""
    scheme = connection.url.scheme
    return f"{_HTTP_SCHEME.get(scheme, scheme)}://{connection.headers.get('host', '')}"


class WebchatCORS:
    def __init__(self, app: ASGIApp, *, origins: Sequence[str]) -> None:
        self._app = app
        self._listed = bool(origins)
        self._cors = CORSMiddleware(
            app,
            allow_origins=list(origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            # Tokens travel in the Authorization header, never in cookies.
            allow_credentials=False,
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._listed and scope["path"].startswith(WEBCHAT):
            await self._cors(scope, receive, send)
        elif scope["type"] == "websocket" and scope["path"].startswith(WEBCHAT):
            if self.allows(HTTPConnection(scope)):
                await self._app(scope, receive, send)
            else:
                refusal = "the web chat is for the pages of the origins the gateway lists"
                await WebSocketClose(POLICY_VIOLATION, refusal)(scope, receive, send)
        else:
            await self._app(scope, receive, send)

    def allows(self, connection: HTTPConnection) -> bool:
        """Whether the page (if any) behind a request may use the web chat."""
        origin = connection.headers.get("origin")
        return (
            origin is None
            or origin == own_origin(connection)
            or self._cors.is_allowed_origin(origin)
        )
