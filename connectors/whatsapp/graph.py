"""Sending through the Graph API (`POST {api}/{phone_number_id}/messages`) with aiohttp
(every reply and read receipt goes this way: bench/README.md, stop 44, says why not
httpx), and what its errors mean for delivery."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from gateway.sdk import (
    DeliveryError,
    FileUnavailable,
    LinkGone,
    MediaRefused,
    Undeliverable,
    client_session,
    parse_retry_after,
    read_at_most,
)

# Graph error codes: throughput (per number, per recipient) and generic rate limits.
_RATE_LIMITED = {4, 80007, 130429, 131056, 613}
# Temporary trouble on Meta's side.
_TEMPORARY = {1, 2, 131000, 131016}
WINDOW_CLOSED = 131047
WINDOW_REASON = (
    "outside WhatsApp's 24-hour window since the person's last message: free text may "
    "not be sent (only an approved template could be)"
)
# 131056 is the pair rate limit, about one message every 6 seconds to one person.
PAIR_RATE_SECONDS = 6.0


class WindowClosed(Undeliverable):
    """WhatsApp refused free text: the person's last message is over 24 hours old."""


class GraphClient:
    def __init__(self, *, api_url: str, phone_number_id: str, token: str) -> None:
        self._api = api_url.rstrip("/")
        self._url = f"{self._api}/{phone_number_id}/messages"
        self._token = token
        self._http: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self._http = client_session(
            self._api,
            aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=20.0),
            headers={"Authorization": f"Bearer {self._token}"},
        )

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a message body; the decoded answer, or a `DeliveryError` saying why not."""
        if self._http is None:
            raise DeliveryError("the WhatsApp connector is not started")
        try:
            async with self._http.post(
                self._url, data=orjson.dumps(body), headers=_JSON
            ) as response:
                answer = _decoded(await response.read())
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise DeliveryError(f"WhatsApp unreachable ({type(exc).__name__})") from None
        if response.ok:
            return answer
        raise _error(response, answer)

    async def media(self, media_id: str, limit: int) -> bytes:
        """A file a person sent: its URL asked for by the media id (a URL lasts five
        minutes, so one that has expired by the download is asked for again, once), then
        the bytes, read no further than `limit`."""
        if self._http is None:
            raise FileUnavailable("the WhatsApp connector is not started", transient=True)
        for _ in range(2):
            url = await self._media_url(media_id, limit)
            try:
                return await read_at_most(self._http, url, limit, where="WhatsApp's media download")
            except LinkGone:
                continue  # its five minutes were up: a fresh one
        raise FileUnavailable("WhatsApp's media URL expired twice", transient=True)

    async def _media_url(self, media_id: str, limit: int) -> str:
        assert self._http is not None
        try:
            async with self._http.get(f"{self._api}/{media_id}") as response:
                answer = _decoded(await response.read())
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise FileUnavailable(
                f"WhatsApp unreachable ({type(exc).__name__})", transient=True
            ) from None
        if not response.ok:
            error = _error(response, answer)
            transient = not isinstance(error, Undeliverable)
            raise FileUnavailable(f"WhatsApp gave no media URL: {error}", transient=transient)
        size = answer.get("file_size")
        if isinstance(size, int) and size > limit:
            raise MediaRefused("too_large", f"the file is larger than {limit} bytes")
        url = answer.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise FileUnavailable("WhatsApp gave no media URL", transient=False)
        return url


_JSON = {"Content-Type": "application/json"}


def _decoded(content: bytes) -> dict[str, Any]:
    """The answer's JSON object ({} for anything else: an error page, nothing)."""
    try:
        answer = orjson.loads(content)
    except orjson.JSONDecodeError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _error(response: aiohttp.ClientResponse, answer: dict[str, Any]) -> DeliveryError:
    error = answer.get("error")
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    data = error.get("error_data")
    details = data.get("details") if isinstance(data, dict) else None
    status = response.status
    reason = (
        f"WhatsApp error {code} ({status}): {details or error.get('message') or response.reason}"
    )
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    if code == WINDOW_CLOSED:
        return WindowClosed(f"{WINDOW_REASON} [{reason}]")
    if code in _RATE_LIMITED or status == 429:
        if retry_after is None and code == 131056:
            retry_after = PAIR_RATE_SECONDS
        return DeliveryError(reason, retry_after=retry_after)
    if code in _TEMPORARY or status >= 500:
        return DeliveryError(reason, retry_after=retry_after)
    return Undeliverable(reason)
