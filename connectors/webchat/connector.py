"""The web chat connector: visitors, their messages and the live socket."""

# No `from __future__ import annotations`: FastAPI must evaluate the route signatures,
# whose dependencies are local to `_router`.

import html
import pathlib
from collections.abc import Sequence
from typing import Annotated

from fastapi import (
    APIRouter,
    Depends,
    Header,
    Path,
    Query,
    Request,
    Response,
    UploadFile,
    WebSocket,
    status,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse

from connectors.webchat.identity import IdentityTokens
from connectors.webchat.schema import (
    ExchangeOut,
    HistoryOut,
    IdentifyIn,
    NewVisitorOut,
    SendIn,
    UploadOut,
)
from connectors.webchat.socket import serve_socket
from connectors.webchat.tokens import VisitorTokens
from connectors.webchat.visitors import CHANNEL, Visitor, Visitors, WebchatCore
from gateway.sdk import (
    GET_AND_HEAD,
    MAX_INT64,
    NAME_CHARS,
    UPLOADS_PATH,
    Asset,
    AuthError,
    Capabilities,
    ChatRef,
    ConversationEnded,
    LeftUnanswered,
    MediaRefused,
    MessageOut,
    Outbound,
    Pace,
    StoredMessage,
    WebchatSettings,
    clean,
    file_response,
)

PAGE = pathlib.Path(__file__).with_name("page.html")
DEMO = PAGE.with_name("demo.html")
DEMO_CSS = PAGE.with_name("demo.css")
PAGE_CSS = PAGE.with_name("page.css")
PAGE_JS = PAGE.with_name("page.js")
MARKDOWN_JS = PAGE.with_name("markdown.js")
WIDGET_JS = PAGE.with_name("widget.js")
# Only the page's own files and its own socket (CSP3 'self' covers same-origin ws:);
# images also from object URLs, which the page makes of files it read with its token.
_PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; "
)
# The demo at `/`: a site like any other, which embeds the widget's frame.
DEMO_CSP = _PAGE_POLICY + "frame-src 'self'; frame-ancestors 'none'"
DEMO_TAG = (
    '<script src="/webchat/widget.js" data-title="Parley" '
    'data-greeting="Hello! Ask me anything." async></script>'
)
# Where the widget's frame may sit: Parley's own pages and the allowed origins'.
HOSTS_META = '<meta name="parley-hosts" content="{hosts}">'


def frame_csp(origins: Sequence[str]) -> str:
    return _PAGE_POLICY + "frame-ancestors " + " ".join(["'self'", *origins])


# Served beside the router (`gateway.http.sockets`): a socket outlives any request.
SOCKET_PATH = "/webchat/ws"


def create(settings: WebchatSettings) -> "WebchatConnector":
    return WebchatConnector(settings)


class WebchatConnector:
    channel = CHANNEL
    # No length limit and no lane: clients read stored messages (socket, polling), so
    # storing a reply delivers it; a refusal is the answer to the client's own request.
    capabilities = Capabilities(notices=False)

    def __init__(self, settings: WebchatSettings) -> None:
        self.visitors = Visitors(settings)
        self.router = _router(self.visitors)
        self.router.include_router(_page_router(settings.allowed_origins))
        self.sockets = {SOCKET_PATH: self._socket}

    async def _socket(self, websocket: WebSocket) -> None:
        # Older clients put the token in the URL; the others send it in the first frame.
        await serve_socket(websocket, self.visitors, websocket.query_params.get("token"))

    async def start(self, core: WebchatCore) -> None:
        settings = self.visitors.settings
        clock = core.clock

        def now() -> float:
            return clock.now().timestamp()

        secret = settings.identity_secret
        identities = (
            None if secret is None else IdentityTokens(secret.get_secret_value().encode(), now)
        )
        self.visitors.open(core, VisitorTokens(settings.signing_keys(), now=now), identities)

    async def stop(self) -> None:
        return None

    async def send(self, outbound: Outbound) -> None:
        return None  # clients read stored messages

    def pacing(self, outbound: Outbound) -> Sequence[Pace]:
        return ()

    async def typing(self, chat: ChatRef) -> None:
        return None  # the socket streams the reply itself

    async def notify(self, chat: ChatRef, text: str) -> None:
        return None  # never called: `capabilities.notices` is off


def _router(visitors: Visitors) -> APIRouter:
    # The routes are closures over `visitors` and share the two auth dependencies
    # defined first, which is why they are one function.
    router = APIRouter(tags=["web chat"])

    async def bearer(authorization: Annotated[str | None, Header()] = None) -> str:
        """The visitor a token grants (checked by signature alone, no database). Async
        though it awaits nothing: FastAPI runs a plain function in its thread pool."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("send the web chat token as `Authorization: Bearer <token>`")
        return visitors.tokens.verify(token.strip()).visitor

    VisitorId = Annotated[str, Depends(bearer)]

    async def shown(messages: Sequence[StoredMessage]) -> list[MessageOut]:
        files = await visitors.core.files_of(messages)
        return [MessageOut.of(m, files.get(m.id, ())) for m in messages]

    async def visitor(visitor_id: VisitorId) -> Visitor:
        return await visitors.by_id(visitor_id)

    CurrentVisitor = Annotated[Visitor, Depends(visitor)]

    @router.post(
        "/webchat/sessions",
        status_code=status.HTTP_201_CREATED,
        responses={429: {"description": "too many new sessions from this address"}},
    )
    async def new_session(request: Request) -> NewVisitorOut:
        await visitors.new_sessions.take(request.client.host if request.client else "")
        visitor, token = await visitors.new_visitor()
        return NewVisitorOut(token=token, conversation_id=visitor.identity.conversation_id)

    @router.post(
        "/webchat/identify",
        responses={
            401: {"description": "the identity token is refused (the answer says why)"},
            429: {"description": "too many sign-ins from this address"},
        },
    )
    async def identify(body: IdentifyIn, request: Request) -> NewVisitorOut:
        """Exchange a site's identity token for a web chat token of that person's one
        conversation; it expires with the identity token."""
        await visitors.new_sessions.take(request.client.host if request.client else "")
        visitor, token = await visitors.identify(body.identity_token)
        return NewVisitorOut(token=token, conversation_id=visitor.identity.conversation_id)

    @router.post(
        "/webchat/messages",
        responses={202: {"description": "stored; the reply is still being written"}},
    )
    async def send_message(body: SendIn, visitor_id: VisitorId, response: Response) -> ExchangeOut:
        received = await visitors.submit(
            visitor_id, body.text, body.client_id, tuple(body.attachments)
        )
        [sent] = await shown([received.message])
        try:
            reply = await visitors.core.reply_to(received, visitors.settings.reply_wait_seconds)
        except ConversationEnded as ended:
            return ExchangeOut(message=sent, reply=None, notice=ended.notice)
        except LeftUnanswered:  # stored; no reply comes today (the day's tokens are spent)
            return ExchangeOut(message=sent, reply=None)
        if reply is None:
            response.status_code = status.HTTP_202_ACCEPTED
        return ExchangeOut(message=sent, reply=None if reply is None else MessageOut.of(reply))

    @router.post(
        UPLOADS_PATH,
        status_code=status.HTTP_201_CREATED,
        responses={
            413: {"description": "the file is larger than PARLEY_MEDIA_MAX_BYTES"},
            415: {"description": "not a kind of file Parley reads (for now: images)"},
            422: {"description": "empty, corrupt, or not multipart"},
            429: {"description": "too many uploads a minute"},
        },
    )
    async def upload(visitor: CurrentVisitor, file: UploadFile) -> UploadOut:
        """Keep a file for the visitor's next message: JPEG, PNG, WebP or GIF (its
        first frame), sent as multipart `file`. The image is kept without its EXIF
        (location included), its longest side at most 1568 px."""
        await visitors.uploads.take(visitor.id)
        limit = visitors.settings.media_max_bytes
        data = await file.read(limit + 1)
        if len(data) > limit:
            raise MediaRefused("too_large", f"the file is larger than {limit} bytes")
        kept = await visitors.core.upload(
            visitor.identity.identity_id, clean(file.filename or "")[:NAME_CHARS], data
        )
        return UploadOut(
            attachment_id=kept.id,
            kind=kept.kind,
            mime=kept.mime,
            bytes=kept.size,
            width=kept.width,
            height=kept.height,
        )

    @router.get("/webchat/messages")
    async def history(
        visitor: CurrentVisitor,
        after_seq: Annotated[int | None, Query(ge=0, le=MAX_INT64)] = None,
        before_seq: Annotated[int | None, Query(ge=1, le=MAX_INT64)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
    ) -> HistoryOut:
        """The messages after `after_seq` (default: from the first) or, with `before_seq`,
        the newest ones before it; oldest first either way."""
        conversation = visitor.identity.conversation_id
        if before_seq is None:
            messages = await visitors.core.history(conversation, after_seq or 0, limit)
        elif after_seq is None:
            messages = await visitors.core.earlier(conversation, before_seq, limit)
        else:
            problem = {"loc": ("query", "before_seq"), "type": "value_error"}
            raise RequestValidationError(
                [problem | {"msg": "give after_seq or before_seq, not both"}]
            )
        return HistoryOut(messages=await shown(messages))

    @router.get(
        "/webchat/attachments/{attachment_id}",
        responses={200: {"content": {"application/octet-stream": {}}}, 404: {}},
        response_class=Response,
    )
    async def attachment(
        visitor: CurrentVisitor, attachment_id: Annotated[int, Path(ge=1, le=MAX_INT64)]
    ) -> Response:
        """A file the visitor uploaded, or one sent in their conversation, as a download;
        404 for any other, whether or not it exists."""
        return file_response(*await visitors.core.file_for(visitor.identity, attachment_id))

    return router


def _page_router(origins: Sequence[str]) -> APIRouter:
    """The page, the widget's frame (the same page, framed by the allowed origins) and
    their own files, served with a CSP that allows nothing else."""
    router = APIRouter(tags=["web chat"])
    page_html = PAGE.read_text(encoding="utf-8")
    demo_html = DEMO.read_text(encoding="utf-8")
    files = {
        # Any site may load the loader; what it opens is the framed page below.
        "widget.js": Asset.read(
            WIDGET_JS,
            "text/javascript",
            **{"Cross-Origin-Resource-Policy": "cross-origin", "Cache-Control": "max-age=300"},
        ),
        "page.js": Asset.read(PAGE_JS, "text/javascript"),
        "markdown.js": Asset.read(MARKDOWN_JS, "text/javascript"),
        "page.css": Asset.read(PAGE_CSS, "text/css"),
        "demo.css": Asset.read(DEMO_CSS, "text/css"),
    }
    hosts = HOSTS_META.format(hosts=html.escape(" ".join(origins)))
    frame_html = page_html.replace("<head>\n", f"<head>\n{hosts}\n", 1)
    framed = {"Content-Security-Policy": frame_csp(origins)}

    @router.api_route(
        "/", methods=GET_AND_HEAD, response_class=HTMLResponse, include_in_schema=False
    )
    async def demo(request: Request) -> HTMLResponse:
        base = str(request.base_url).rstrip("/")
        snippet = f'<script src="{base}/webchat/widget.js" data-title="Help" async></script>'
        body = demo_html.replace("{snippet}", html.escape(snippet)).replace("{tag}", DEMO_TAG)
        return HTMLResponse(body, headers={"Content-Security-Policy": DEMO_CSP})

    @router.api_route(
        "/webchat/frame", methods=GET_AND_HEAD, response_class=HTMLResponse, include_in_schema=False
    )
    async def frame() -> HTMLResponse:
        return HTMLResponse(frame_html, headers=framed)

    for name, asset in files.items():
        router.add_api_route(
            f"/webchat/{name}", asset.response, methods=GET_AND_HEAD, include_in_schema=False
        )

    return router
