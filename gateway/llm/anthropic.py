"""Anthropic's Messages API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.llm.base import ChatTurn, Prompt
from gateway.llm.http import (
    RetryPolicy,
    SSEEvent,
    StreamFailed,
    StreamRequest,
    error_message,
    new_client,
    parse_json,
    stream_text,
)

API_VERSION = "2023-06-01"
OPENING_TURN = "(conversation continues)"

# Error event types that mean "busy or broken right now", not "your request is wrong".
_TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


class AnthropicProvider:
    name = "anthropic"

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
        self._url = f"{base_url.rstrip('/')}/v1/messages"
        self._api_key = api_key
        self._model = model
        self._policy = RetryPolicy(max_retries, retry_base_seconds)
        self._client = new_client(timeout)

    def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        return stream_text(self._client, self._request(prompt), _EventDecoder, self._policy)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _request(self, prompt: Prompt) -> StreamRequest:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return StreamRequest(self.name, self._url, headers, self._body(prompt), self._api_key)

    def _body(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": prompt.model or self._model,
            "max_tokens": prompt.max_tokens,
            "messages": anthropic_messages(prompt.turns),
            "stream": True,
        }
        if prompt.system:  # the API refuses an empty text block
            # Marking the system block lets the unchanged prefix be served from the cache.
            body["system"] = [
                {"type": "text", "text": prompt.system, "cache_control": {"type": "ephemeral"}}
            ]
        return body


def anthropic_messages(turns: tuple[ChatTurn, ...]) -> list[dict[str, str]]:
    """Turns as the API accepts them: roles alternate and the first one is the user's."""
    messages: list[dict[str, str]] = []
    for turn in turns:
        if not turn.content.strip():
            continue  # the API refuses empty content
        if messages and messages[-1]["role"] == turn.role:
            messages[-1]["content"] += "\n\n" + turn.content
        else:
            messages.append({"role": turn.role, "content": turn.content})
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": OPENING_TURN})
    return messages


class _EventDecoder:
    def __init__(self) -> None:
        self.finished = False

    def feed(self, event: SSEEvent) -> str:
        payload = parse_json(event)
        kind = payload.get("type", event.event)
        if kind == "message_stop":
            self.finished = True
        elif kind == "error":
            raise _error_event(payload)
        elif kind == "content_block_delta":
            return _delta_text(payload)
        return ""


def _delta_text(payload: dict[str, Any]) -> str:
    delta = payload.get("delta")
    if not isinstance(delta, dict) or delta.get("type") != "text_delta":
        return ""  # e.g. thinking or tool-input deltas, which are not reply text
    text = delta.get("text")
    return text if isinstance(text, str) else ""


def _error_event(payload: dict[str, Any]) -> StreamFailed:
    error = payload.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    return StreamFailed(
        f"anthropic stream error ({kind or 'unknown'})",
        detail=error_message(payload) or "",
        retryable=kind in _TRANSIENT_ERROR_TYPES,
    )
