"""Speech to text with any OpenAI-compatible `POST /audio/transcriptions` (DESIGN §11):
a voice note's words become the person's own, behind their source line.

Retried like a model call (429, 5xx, time-outs, with backoff or the server's
`Retry-After`); the API key is never in an error.
"""

from __future__ import annotations

import asyncio
import json

import httpx

from gateway.backoff import parse_retry_after
from gateway.errors import LLMUnavailable
from gateway.llm.http import (
    CONNECT_TIMEOUT_SECONDS,
    RETRYABLE_STATUSES,
    RetryPolicy,
    StreamFailed,
    error_message,
)

# What a transcript is cut to: a voice note of many minutes still fits a prompt.
TRANSCRIPT_CHARS = 20_000
_TRANSIENT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class Transcriber:
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float,
        max_retries: int,
        retry_base_seconds: float,
    ) -> None:
        self._url = f"{base_url.rstrip('/')}/audio/transcriptions"
        self._api_key = api_key
        self._model = model
        self._policy = RetryPolicy(max_retries, retry_base_seconds)
        # A voice note is one upload, now and then: httpx's multipart is enough here.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_SECONDS)
        )

    async def transcribe(self, data: bytes, mime: str, file_name: str) -> str:
        """The words said; `LLMUnavailable` once retrying cannot help."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._attempt(data, mime, file_name)
            except StreamFailed as failure:
                if not failure.retryable or attempt > self._policy.max_retries:
                    reason = failure.describe(self._api_key)
                    raise LLMUnavailable(f"transcription: {reason}", attempts=attempt) from None
                await asyncio.sleep(self._policy.delay(attempt - 1, failure.retry_after))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _attempt(self, data: bytes, mime: str, file_name: str) -> str:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        try:
            response = await self._client.post(
                self._url,
                headers=headers,
                files={"file": (file_name, data, mime)},
                data={"model": self._model},
            )
        except _TRANSIENT_ERRORS as exc:
            raise StreamFailed(f"no answer ({type(exc).__name__})", retryable=True) from None
        except httpx.HTTPError as exc:
            raise StreamFailed(f"request failed ({type(exc).__name__})", retryable=False) from None
        if not response.is_success:
            raise StreamFailed(
                f"HTTP {response.status_code}",
                detail=_message(response.content) or "",
                retryable=response.status_code in RETRYABLE_STATUSES,
                retry_after=parse_retry_after(response.headers.get("retry-after")),
            )
        try:
            text = response.json().get("text")
        except (ValueError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise StreamFailed("the answer holds no text", retryable=False)
        return " ".join(text.split())[:TRANSCRIPT_CHARS]


def _message(body: bytes) -> str | None:
    try:
        return error_message(json.loads(body[:8192]))
    except ValueError:
        return None
