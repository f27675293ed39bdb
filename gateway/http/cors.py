"""CORS for the web chat API, and only for it: the origins in
PARLEY_WEBCHAT_ALLOWED_ORIGINS may call `/webchat/...` from their pages' scripts.

The operator API never answers another origin's scripts: it is for servers and the
dashboard, which is served from Parley's own origin.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

WEBCHAT = "/webchat/"


class WebchatCORS:
    def __init__(self, app: ASGIApp, *, origins: Sequence[str]) -> None:
        self._app = app
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
        if scope["type"] == "http" and scope["path"].startswith(WEBCHAT):
            await self._cors(scope, receive, send)
        else:
            await self._app(scope, receive, send)
