"""The web chat connector: visitors, their messages and the live socket."""

# No `from __future__ import annotations`: FastAPI must evaluate the route signatures,
# whose dependencies are local to `_router`.

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Response, WebSocket, status
from fastapi.responses import HTMLResponse

from connectors.webchat.schema import ExchangeOut, HistoryOut, NewVisitorOut, SendIn
from connectors.webchat.socket import serve_socket
from connectors.webchat.tokens import VisitorTokens
from gateway.channels.core import Core, Received
from gateway.errors import AuthError, InputError
from gateway.http.ratelimit import RateLimit, Slots
from gateway.http.wire import MessageOut
from gateway.messages import Inbound, Outbound
from gateway.secrets import signing_key
from gateway.settings import Settings
from gateway.text import MAX_INT64
from memory.storage.identities import IdentityRef

CHANNEL = "webchat"
VISITOR_NAME = "Web visitor"
PAGE = Path(__file__).with_name("page.html")
PAGE_CSS = PAGE.with_name("page.css")
PAGE_JS = PAGE.with_name("page.js")
# Only the page's own files and its own socket (CSP3 'self' covers same-origin ws:).
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def create(core: Core, settings: Settings) -> "WebchatConnector":
    return WebchatConnector(core, settings)


@dataclass(frozen=True, slots=True)
class Visitor:
    id: str
    identity: IdentityRef


class WebchatConnector:
    channel = CHANNEL
    # Clients read stored messages (socket, polling): storing a reply delivers it.
    delivered_by_storing = True

    def __init__(self, core: Core, settings: Settings) -> None:
        self.core = core
        self.settings = settings
        self._tokens: VisitorTokens | None = None
        self.new_sessions = RateLimit(settings.webchat_sessions_per_minute, "new sessions")
        self.messages = RateLimit(settings.webchat_messages_per_minute, "messages")
        # A client told to wait for a free socket slot tries again after this long.
        self.sockets = Slots(settings.webchat_sockets_per_visitor, "open sockets", retry_after=10)
        self.router = _router(self)

    async def start(self) -> None:
        self._tokens = VisitorTokens(signing_key(self.settings))

    async def stop(self) -> None:
        return None

    async def send(self, outbound: Outbound) -> None:
        # Nothing to push: clients read stored messages from the socket or by polling.
        return None

    @property
    def tokens(self) -> VisitorTokens:
        if self._tokens is None:
            raise RuntimeError("web chat used before start()")
        return self._tokens

    async def new_visitor(self) -> tuple[Visitor, str]:
        visitor_id, token = self.tokens.new_visitor()
        identity = await self.core.identity(CHANNEL, visitor_id, VISITOR_NAME)
        return Visitor(visitor_id, identity), token

    async def visitor(self, token: str) -> Visitor:
        visitor_id = self.tokens.verify(token)
        return Visitor(visitor_id, await self.core.identity(CHANNEL, visitor_id, VISITOR_NAME))

    async def submit(self, visitor_id: str, text: str, client_id: str | None) -> Received:
        self.messages.take(visitor_id)
        if not text.strip():
            raise InputError("text must not be empty")
        limit = self.settings.max_message_chars
        if len(text) > limit:
            raise InputError(f"text is longer than {limit} characters")
        inbound = Inbound(
            channel=CHANNEL,
            external_user_id=visitor_id,
            text=text,
            # Client ids are only unique per visitor; the platform id must be per channel.
            platform_message_id=None if client_id is None else f"{visitor_id}:{client_id}",
            display_name=VISITOR_NAME,
        )
        return await self.core.receive(inbound)


def _router(connector: WebchatConnector) -> APIRouter:
    router = APIRouter(tags=["web chat"])
    page_html = PAGE.read_text(encoding="utf-8")
    page_css = PAGE_CSS.read_text(encoding="utf-8")
    page_js = PAGE_JS.read_text(encoding="utf-8")

    def bearer(authorization: Annotated[str | None, Header()] = None) -> str:
        """The visitor a token grants (checked by signature alone, no database)."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("send the web chat token as `Authorization: Bearer <token>`")
        return connector.tokens.verify(token.strip())

    VisitorId = Annotated[str, Depends(bearer)]

    async def visitor(visitor_id: VisitorId) -> Visitor:
        return Visitor(visitor_id, await connector.core.identity(CHANNEL, visitor_id, VISITOR_NAME))

    CurrentVisitor = Annotated[Visitor, Depends(visitor)]

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(page_html, headers={"Content-Security-Policy": PAGE_CSP})

    @router.get("/webchat/page.css", include_in_schema=False)
    async def page_style() -> Response:
        return Response(page_css, media_type="text/css")

    @router.get("/webchat/page.js", include_in_schema=False)
    async def page_script() -> Response:
        return Response(page_js, media_type="text/javascript")

    @router.post(
        "/webchat/sessions",
        status_code=status.HTTP_201_CREATED,
        responses={429: {"description": "too many new sessions from this address"}},
    )
    async def new_session(request: Request) -> NewVisitorOut:
        connector.new_sessions.take(request.client.host if request.client else "")
        visitor, token = await connector.new_visitor()
        return NewVisitorOut(token=token, conversation_id=visitor.identity.conversation_id)

    @router.post(
        "/webchat/messages",
        responses={202: {"description": "stored; the reply is still being written"}},
    )
    async def send_message(body: SendIn, visitor_id: VisitorId, response: Response) -> ExchangeOut:
        received = await connector.submit(visitor_id, body.text, body.client_id)
        reply = await connector.core.reply_to(received, connector.settings.reply_wait_seconds)
        if reply is None:
            response.status_code = status.HTTP_202_ACCEPTED
        return ExchangeOut(
            message=MessageOut.of(received.message),
            reply=None if reply is None else MessageOut.of(reply),
        )

    @router.get("/webchat/messages")
    async def history(
        visitor: CurrentVisitor,
        after_seq: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
    ) -> HistoryOut:
        messages = await connector.core.history(visitor.identity.conversation_id, after_seq, limit)
        return HistoryOut(messages=[MessageOut.of(m) for m in messages])

    @router.websocket("/webchat/ws")
    async def socket(websocket: WebSocket, token: str = "") -> None:
        await serve_socket(websocket, connector, token)

    return router
