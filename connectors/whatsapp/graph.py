"""Sending through the Graph API (`POST {api}/{phone_number_id}/messages`) with httpx,
and what its errors mean for delivery."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.sdk import (
    DeliveryError,
    FileUnavailable,
    LinkGone,
    MediaRefused,
    Undeliverable,
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
        self._http: httpx.AsyncClient | None = None

    async def open(self) -> None:
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(20.0, connect=5.0),
            headers={"Authorization": f"Bearer {self._token}"},
        )

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a message body; the decoded answer, or a `DeliveryError` saying why not."""
        if self._http is None:
            raise DeliveryError("the WhatsApp connector is not started")
        try:
            response = await self._http.post(self._url, json=body)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"WhatsApp unreachable ({type(exc).__name__})") from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            answer = {}
        if response.is_success:
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
            response = await self._http.get(f"{self._api}/{media_id}")
            answer = response.json() if response.content else {}
        except (httpx.HTTPError, ValueError) as exc:
            raise FileUnavailable(
                f"WhatsApp unreachable ({type(exc).__name__})", transient=True
            ) from None
        if not response.is_success or not isinstance(answer, dict):
            error = _error(response, answer if isinstance(answer, dict) else {})
            transient = not isinstance(error, Undeliverable)
            raise FileUnavailable(f"WhatsApp gave no media URL: {error}", transient=transient)
        size = answer.get("file_size")
        if isinstance(size, int) and size > limit:
            raise MediaRefused("too_large", f"the file is larger than {limit} bytes")
        url = answer.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise FileUnavailable("WhatsApp gave no media URL", transient=False)
        return url


def _error(response: httpx.Response, answer: dict[str, Any]) -> DeliveryError:
    error = answer.get("error")
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    data = error.get("error_data")
    details = data.get("details") if isinstance(data, dict) else None
    reason = f"WhatsApp error {code} ({response.status_code}): {details or error.get('message') or response.reason_phrase}"
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    if code == WINDOW_CLOSED:
        return WindowClosed(f"{WINDOW_REASON} [{reason}]")
    if code in _RATE_LIMITED or response.status_code == 429:
        if retry_after is None and code == 131056:
            retry_after = PAIR_RATE_SECONDS
        return DeliveryError(reason, retry_after=retry_after)
    if code in _TEMPORARY or response.status_code >= 500:
        return DeliveryError(reason, retry_after=retry_after)
    return Undeliverable(reason)
