"""One line per request, with a request id that every log line of the request carries.

The line names the method, the path without its query (a web chat token may ride in
it) and with the secret of a one-time link cut out, the status and the time taken;
never a body. A client's own `X-Request-ID` is kept when it is a plausible id, so a
request can be followed from a proxy's logs to ours.
"""

from __future__ import annotations

import re
import time
import uuid

import structlog
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.commands.rights import EXPORT_PATH
from gateway.logs import REDACTED

HEADER = "x-request-id"
_PLAUSIBLE = re.compile(r"[A-Za-z0-9._-]{1,64}")
# Where a path carries a secret, all of it after this: the token of a one-time link a
# person was given. (Other tokens ride in query strings, which are never logged.)
# Matched anywhere in the path, so a prefix a proxy adds does not hide one.
_SECRET_REST = re.compile("(" + re.escape(EXPORT_PATH) + ").+")

log = structlog.get_logger("parley.access")


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        request_id = _request_id(scope)
        started = time.perf_counter()
        status: int | None = None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                status = message["status"]
                MutableHeaders(scope=message)[HEADER] = request_id
            elif message["type"] == "websocket.accept":
                status = 101
            elif message["type"] == "websocket.close" and status is None:
                status = 403  # a handshake refused: the server answers it so
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            try:
                await self._app(scope, receive, send_with_id)
            except Exception:
                status = status or 500  # the server's error handler answers for it
                raise
            finally:
                log.info(
                    "request" if scope["type"] == "http" else "websocket",
                    method=scope.get("method", "GET"),
                    path=loggable_path(scope["path"]),
                    status=status,
                    ms=round((time.perf_counter() - started) * 1000, 1),
                    client=(scope.get("client") or ("", 0))[0],
                )


def loggable_path(path: str) -> str:
    """`path` with the secrets it carries replaced."""
    return _SECRET_REST.sub(r"\1" + REDACTED, path)


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == HEADER.encode():
            given: str = value.decode("latin-1")
            if _PLAUSIBLE.fullmatch(given):
                return given
    return uuid.uuid4().hex
