"""A fake WhatsApp Cloud API (Graph API) on a real localhost socket, and notifications
shaped like Meta's documentation, signed the way Meta signs them.

Sends go to `POST /v21.0/{phone_number_id}/messages` with a bearer token; text sends
answer `{"messaging_product", "contacts", "messages": [{"id": "wamid…"}]}`, read
receipts `{"success": true}`, failures the Graph error object. Tests script failures
(`GraphFail`) for text sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import serve

TOKEN = "EAAG-test-graph-token-that-must-not-leak"
APP_SECRET = "test-app-secret-0123456789abcdef"
VERIFY_TOKEN = "test-verify-token-0123456789"
PHONE_NUMBER_ID = "106540352242922"
DISPLAY_NUMBER = "15550783881"
WABA_ID = "102290129340398"
VERSION = "v21.0"
LIMIT = 4096


class GraphFail:
    """The next text send fails with a Graph error."""

    def __init__(
        self, status: int, code: int, message: str, retry_after: float | None = None
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


def throttled() -> GraphFail:
    return GraphFail(400, 130429, "(#130429) Rate limit hit", retry_after=None)


class FakeGraph:
    def __init__(self) -> None:
        self.base_url = ""
        self.texts_sent: list[dict[str, Any]] = []
        self.templates_sent: list[dict[str, Any]] = []
        self.reads: list[dict[str, Any]] = []
        self.attempts = 0
        self._failures: deque[GraphFail | None] = deque()
        self._changed = asyncio.Condition()
        self._ids = itertools.count(1)
        # Files people sent, by media id; the media URLs handed out and downloads asked
        # (by media id); how many of the next downloads find their URL expired.
        self.media: dict[str, bytes] = {}
        self.media_lookups: list[str] = []
        self.downloads: list[str] = []
        self.expire_downloads = 0
        self.app = Starlette(
            routes=[
                Route("/download/{media_id}", self._download),
                Route("/{version}/{phone}/messages", self._messages, methods=["POST"]),
                Route("/{version}/{phone}", self._phone_number),
            ]
        )

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/{VERSION}"

    def fail(self, *failures: GraphFail | None) -> None:
        """Script the next text sends: a failure, or None for a normal answer."""
        self._failures.extend(failures)

    def texts(self, to: str | None = None) -> list[str]:
        return [m["text"]["body"] for m in self.texts_sent if to is None or m["to"] == to]

    # The timeout parameter is the agreed API for pipeline tests, hence the noqa.
    async def wait_until(
        self,
        predicate: Callable[[FakeGraph], bool],
        seconds: float = 15.0,
    ) -> None:
        try:
            async with asyncio.timeout(seconds), self._changed:
                await self._changed.wait_for(lambda: predicate(self))
        except TimeoutError:
            raise TimeoutError(
                f"condition not met; {len(self.texts_sent)} texts, {len(self.reads)} reads"
            ) from None

    async def _phone_number(self, request: Request) -> JSONResponse:
        """`GET /{phone_number_id}`: the business number, as Meta describes it."""
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return _graph_error(401, 190, "Invalid OAuth access token - Cannot parse access token")
        phone = request.path_params["phone"]
        if phone in self.media:
            return self._media_url(phone)
        if phone != PHONE_NUMBER_ID:
            return _graph_error(
                400,
                100,
                f"Unsupported get request. Object with ID '{phone}' does not exist, cannot be "
                "loaded due to missing permissions, or does not support this operation",
            )
        return JSONResponse(
            {
                "verified_name": "Parley Test",
                "display_phone_number": "+1 555-010-0199",
                "id": PHONE_NUMBER_ID,
            }
        )

    def _media_url(self, media_id: str) -> JSONResponse:
        """`GET /{media_id}`: where to download the file, for five minutes."""
        self.media_lookups.append(media_id)
        data = self.media[media_id]
        return JSONResponse(
            {
                "messaging_product": "whatsapp",
                "url": f"{self.base_url}/download/{media_id}",
                "mime_type": "image/jpeg",
                "sha256": hashlib.sha256(data).hexdigest(),
                "file_size": len(data),
                "id": media_id,
            }
        )

    async def _download(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return Response(status_code=401)
        media_id = request.path_params["media_id"]
        self.downloads.append(media_id)
        if self.expire_downloads:
            self.expire_downloads -= 1
            return Response(status_code=404)  # the URL's five minutes are up
        data = self.media.get(media_id)
        return Response(status_code=404) if data is None else Response(data)

    async def _messages(self, request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return _graph_error(401, 190, "Invalid OAuth access token - Cannot parse access token")
        if (
            request.path_params["phone"] != PHONE_NUMBER_ID
            or request.path_params["version"] != VERSION
        ):
            return _graph_error(400, 100, "Unsupported post request")
        try:
            body = await request.json()
        except ClientDisconnect:
            # The gateway hung up before this was read (a typing indicator stopped as
            # its reply went out): nobody to answer, nothing taken.
            return JSONResponse({}, status_code=499)
        try:
            return await self._handle(body)
        finally:
            async with self._changed:
                self._changed.notify_all()

    async def _handle(self, body: dict[str, Any]) -> JSONResponse:
        if body.get("messaging_product") != "whatsapp":
            return _graph_error(400, 100, "Invalid parameter")
        if body.get("status") == "read":
            self.reads.append(body)
            return JSONResponse({"success": True})
        self.attempts += 1
        failure = self._failures.popleft() if self._failures else None
        if failure is not None:
            headers = (
                {} if failure.retry_after is None else {"Retry-After": str(failure.retry_after)}
            )
            return _graph_error(failure.status, failure.code, failure.message, headers)
        if body.get("type") == "template":
            return self._template(body)
        text = body.get("text", {}).get("body", "")
        if body.get("type") != "text" or not text:
            return _graph_error(400, 100, "Invalid parameter")
        if len(text.encode("utf-16-le")) // 2 > LIMIT:
            return _graph_error(
                400, 100, "Param text['body'] must be at most 4096 characters long."
            )
        self.texts_sent.append(body)
        wamid = f"wamid.OUT{next(self._ids):06d}"
        return JSONResponse(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": body["to"], "wa_id": body["to"]}],
                "messages": [{"id": wamid}],
            }
        )

    def _template(self, body: dict[str, Any]) -> JSONResponse:
        """An approved template with one text parameter (no line breaks or tabs)."""
        template = body.get("template") or {}
        [component] = template.get("components") or [{}]
        [parameter] = component.get("parameters") or [{}]
        text = parameter.get("text", "")
        if not template.get("name") or not template.get("language", {}).get("code"):
            return _graph_error(400, 100, "Invalid parameter")
        if not text or "\n" in text or "\t" in text:
            return _graph_error(400, 132018, "There was an issue with the parameters")
        self.templates_sent.append(body)
        return JSONResponse(
            {"messaging_product": "whatsapp", "messages": [{"id": f"wamid.T{next(self._ids):06d}"}]}
        )

    def wamid_of(self, index: int) -> str:
        """The id the fake gave to the `index`-th accepted text (0-based)."""
        return f"wamid.OUT{index + 1:06d}"


def _graph_error(
    status: int, code: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {
            "error": {
                "message": message,
                "type": "OAuthException",
                "code": code,
                "error_data": {"messaging_product": "whatsapp", "details": message},
                "fbtrace_id": "AbCdEfGh123",
            }
        },
        status,
        headers=headers,
    )


@contextlib.asynccontextmanager
async def fake_graph() -> AsyncIterator[FakeGraph]:
    fake = FakeGraph()
    async with serve(fake.app) as url:
        fake.base_url = url
        yield fake


def whatsapp_settings(fake: FakeGraph, **extra: Any) -> dict[str, Any]:
    return {
        "whatsapp_token": TOKEN,
        "whatsapp_app_secret": APP_SECRET,
        "whatsapp_verify_token": VERIFY_TOKEN,
        "whatsapp_phone_number_id": PHONE_NUMBER_ID,
        "whatsapp_api_url": fake.api_url,
    } | extra


# -- notifications shaped like Meta's documentation --------------------------------------

_wamids = itertools.count(1)


def new_wamid() -> str:
    return f"wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA{next(_wamids):05d}="


def envelope(value: dict[str, Any], field: str = "messages") -> dict[str, Any]:
    return {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": WABA_ID,
                "changes": [
                    {
                        "field": field,
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {
                                "display_phone_number": DISPLAY_NUMBER,
                                "phone_number_id": PHONE_NUMBER_ID,
                            },
                        }
                        | value,
                    }
                ],
            }
        ],
    }


def message_notification(
    wa_id: str,
    kind: str = "text",
    *,
    name: str = "Kerry Fisher",
    text: str = "",
    wamid: str | None = None,
    timestamp: int | None = None,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "from": wa_id,
        "id": wamid or new_wamid(),
        "timestamp": str(timestamp if timestamp is not None else int(time.time())),
        "type": kind,
    }
    message[kind] = {"body": text} if kind == "text" else (body or {})
    return envelope(
        {"contacts": [{"profile": {"name": name}, "wa_id": wa_id}], "messages": [message]}
    )


def status_notification(
    wamid: str, status: str, recipient: str, errors: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": wamid,
        "status": status,
        "timestamp": str(int(time.time())),
        "recipient_id": recipient,
    }
    if status != "failed":
        entry["conversation"] = {
            "id": "CONVERSATION_ID",
            "origin": {"type": "service"},
        }
        entry["pricing"] = {"billable": True, "pricing_model": "CBP", "category": "service"}
    if errors:
        entry["errors"] = errors
    return envelope({"statuses": [entry]})


def signed(
    payload: dict[str, Any] | bytes, secret: str = APP_SECRET
) -> tuple[bytes, dict[str, str]]:
    """The raw body and headers of a notification as Meta sends it."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return body, {"X-Hub-Signature-256": f"sha256={digest}", "Content-Type": "application/json"}
