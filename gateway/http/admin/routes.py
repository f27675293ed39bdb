"""Sign-in, sign-out, the dashboard's page and files, and its live socket."""

# No `from __future__ import annotations`: FastAPI reads the route signatures.

import asyncio
import contextlib
import html
import uuid
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, WebSocket, WebSocketDisconnect, status
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.events.hub import DeliveryChanged, DeltaEvent, Event, Overflow, Typing
from gateway.http.assets import GET_AND_HEAD, Asset
from gateway.http.cors import own_origin
from gateway.http.deps import HubDep, OperatorsDep
from gateway.http.operators import OperatorAuth
from gateway.http.problems import ApiError, responses

STATIC = Path(__file__).with_name("static")
# Scripts, styles, the socket and pictures from this origin only; framed by nobody.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    # Files people sent are read with the session into object URLs: images and audio.
    "img-src 'self' data: blob:; media-src blob:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
# The page's scripts are ES modules, one per page, loaded as they are (no build step).
MEDIA = {".js": "text/javascript", ".css": "text/css"}
# Close codes of the live socket: the 4000s mirror the HTTP status.
UNAUTHORIZED = 4401
FORBIDDEN = 4403

router = APIRouter(tags=["dashboard"], include_in_schema=False)


class SignIn(BaseModel):
    """The admin token, or the secret of a one-time sign-in link."""

    model_config = ConfigDict(extra="forbid", strict=True)

    token: str | None = Field(default=None, min_length=1, max_length=4096)
    link: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _one(self) -> "SignIn":
        if (self.token is None) == (self.link is None):
            raise ValueError("send either the admin token or a sign-in link")
        return self


# Read once: the files ship with the package and never change while it runs.
_TEXTS = {
    name: (STATIC / name).read_text(encoding="utf-8") for name in ("signin.html", "admin.html")
}
_FILES = {
    path.name: Asset.read(path, MEDIA[path.suffix])
    for path in STATIC.iterdir()
    if path.suffix in MEDIA
}


def _page(name: str, **values: str) -> HTMLResponse:
    text = _TEXTS[name]
    for key, value in values.items():
        text = text.replace("{" + key + "}", html.escape(value))
    return HTMLResponse(
        text, headers={"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-store"}
    )


@router.get("/admin/signin", response_class=HTMLResponse)
async def signin_page() -> HTMLResponse:
    return _page("signin.html")


@router.post(
    "/admin/session", status_code=status.HTTP_204_NO_CONTENT, responses=responses(401, 429, 503)
)
async def sign_in(body: SignIn, request: Request, operators: OperatorsDep) -> Response:
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    await operators.sign_in(request, response, token=body.token, link=body.link)
    return response


@router.delete(
    "/admin/session", status_code=status.HTTP_204_NO_CONTENT, responses=responses(401, 403)
)
async def sign_out(request: Request, operators: OperatorsDep) -> Response:
    operator = await operators.operator(request)
    if operator is None:
        raise ApiError(401, "not signed in")
    operators.check_change(request, operator)
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    await operators.sign_out(operator, response)
    return response


@router.get("/admin", response_class=HTMLResponse)
async def dashboard(request: Request, operators: OperatorsDep) -> Response:
    operator = await operators.operator(request)
    if operator is None:
        return RedirectResponse("/admin/signin", status_code=status.HTTP_303_SEE_OTHER)
    return _page("admin.html", csrf=operator.csrf)


@router.api_route("/admin/static/{name}", methods=GET_AND_HEAD)
async def static_file(name: str, request: Request) -> Response:
    found = _FILES.get(name)
    if found is None:
        raise ApiError(404, "no such file")
    return found.response(request)


@router.websocket("/admin/live")
async def live(
    websocket: WebSocket,
    hub: HubDep,
    operators: OperatorsDep,
    session: Annotated[uuid.UUID, Query()],
) -> None:
    """A doorbell: `{"type": "changed"}` whenever the conversation stores a message here
    or on another replica, `{"type": "delivery", "seq": N}` when message N's delivery
    moved on; the page reads what is new from the REST API by seq, so a missed ring (a
    reconnect) costs nothing. `{"type": "ready"}` again when rings may have been missed
    (this socket fell behind, or the replica has only now begun to hear the conversation
    from the others): the page reads again what is new and how pending deliveries went."""
    await websocket.accept()
    reason = await _refusal(websocket, operators)
    if reason is not None:
        await websocket.send_json({"type": "error", "detail": reason[1]})
        await websocket.close(code=reason[0])
        return
    with hub.subscribe(session) as events:
        await websocket.send_json({"type": "ready"})
        ring = asyncio.create_task(_ring(websocket, events))
        try:
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass  # the page says nothing; this notices it leaving
        except WebSocketDisconnect:
            pass
        finally:
            ring.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                await ring


async def _refusal(websocket: WebSocket, operators: OperatorAuth) -> tuple[int, str] | None:
    # A socket has no CSRF header: the browser's Origin must be the dashboard's own.
    if websocket.headers.get("origin") != own_origin(websocket):
        return FORBIDDEN, "the live socket is for the dashboard's own page"
    if await operators.operator(websocket) is None:
        return UNAUTHORIZED, "sign in first"
    return None


async def _ring(websocket: WebSocket, events: "asyncio.Queue[Event]") -> None:
    while True:
        event = await events.get()
        if isinstance(event, DeliveryChanged):
            await websocket.send_json({"type": "delivery", "seq": event.seq})
        elif isinstance(event, Overflow):
            # A "changed" would read new messages only, not a delivery ring that was lost.
            await websocket.send_json({"type": "ready"})
        elif not isinstance(event, DeltaEvent | Typing):
            await websocket.send_json({"type": "changed"})
