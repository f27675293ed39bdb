"""Security headers on every HTTP response, and a strict policy on every HTML page.

The headers are added as the response starts, so they hold for routes, error
handlers and middleware answers (a 413 from `BodyLimit`) alike. A route that needs
more than the strict default (the docs, the web chat page) sets its own policy.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Nothing may load, submit or frame: a page that needs more says exactly what.
STRICT_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

_EVERY_RESPONSE = {
    # Browsers must not guess a script or a page out of JSON or text.
    "X-Content-Type-Options": "nosniff",
    # No link or fetch tells another site which of our URLs (or query strings) it came from.
    "Referrer-Policy": "no-referrer",
}
NOT_FRAMED = "frame-ancestors 'none'"


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                _add(MutableHeaders(scope=message))
            await send(message)

        await self._app(scope, receive, send_with_headers)


def _add(headers: MutableHeaders) -> None:
    for name, value in _EVERY_RESPONSE.items():
        headers.setdefault(name, value)
    if _is_html(headers.get("content-type", "")):
        policy = headers.setdefault("Content-Security-Policy", STRICT_CSP)
        if NOT_FRAMED in policy:
            # For browsers that predate CSP's frame-ancestors (a page that may be
            # framed, the web chat's frame, says where in its own policy).
            headers.setdefault("X-Frame-Options", "DENY")


def _is_html(content_type: str) -> bool:
    return content_type.partition(";")[0].strip().lower() == "text/html"
