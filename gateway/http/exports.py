"""`/exports/{token}`: the download a person's `/export` link opens, once.

Opening the link (GET or HEAD) only shows a page with a Download button; the button's
POST spends the token and sends the file. Link previews, virus scanners and mail
gateways open links they see with GET or HEAD: were that the download, they would spend
the one-time link before the person could use it. The page loads nothing and runs no
script, so it works in any browser, and it is never cached.
"""

from __future__ import annotations

import base64
import hashlib
import html
from typing import Annotated

from fastapi import APIRouter, Path, status
from fastapi.responses import HTMLResponse, StreamingResponse

from gateway.commands.rights import EXPORT_PATH
from gateway.http.api.erasure import export_response
from gateway.http.assets import GET_AND_HEAD
from gateway.http.deps import ExportLinksDep, PortabilityDep

router = APIRouter(tags=["people"], include_in_schema=False)

Token = Annotated[str, Path(min_length=20, max_length=100)]
ROUTE = f"{EXPORT_PATH}{{token}}"

_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}"
    "button{font:inherit;padding:.5rem 1.5rem;cursor:pointer}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
# Nothing loads but the page's own style; its one form posts back here; framed by nobody.
PAGE_CSP = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": PAGE_CSP,
    # The page and the file are the person's alone: no cache keeps either.
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex, nofollow",
}

_DOWNLOAD = (
    "<p>This downloads everything Parley keeps of you — your messages on every "
    "channel, the archive and your profile — as one file.</p>"
    "<p>The link works once: after the download it is spent.</p>"
    # No action: the form posts to this very address.
    '<form method="post"><button type="submit">Download</button></form>'
)
_GONE = (
    "<p>This link has been used or has expired: it works once, for 24 hours.</p>"
    "<p>Send /export in your chat for a new one.</p>"
)


@router.api_route(ROUTE, methods=GET_AND_HEAD, response_class=HTMLResponse)
async def download_page(links: ExportLinksDep, token: Token) -> HTMLResponse:
    """The page with the Download button; spends nothing."""
    if not await links.is_open(token):
        return _page("Link used or expired", _GONE, status.HTTP_404_NOT_FOUND)
    return _page("Your Parley export", _DOWNLOAD, status.HTTP_200_OK)


@router.post(ROUTE, response_model=None)
async def download(
    links: ExportLinksDep, portability: PortabilityDep, token: Token
) -> StreamingResponse | HTMLResponse:
    """The export itself, once: the token is spent as it starts."""
    user_id = await links.redeem(token)
    if user_id is None:
        return _page("Link used or expired", _GONE, status.HTTP_404_NOT_FOUND)
    response = await export_response(portability, user_id)
    response.headers["Cache-Control"] = "no-store"
    return response


def _page(title: str, body: str, status_code: int) -> HTMLResponse:
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="robots" content="noindex, nofollow">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    return HTMLResponse(text, status_code=status_code, headers=_HEADERS)
