"""Anthropic's Messages API."""

from __future__ import annotations

from typing import Any

from gateway.llm.base import Prompt, Usage
from gateway.llm.http import HTTPProvider, SSEEvent, StreamFailed, error_message, parse_json
from memory.chat_turn import ChatTurn

API_VERSION = "2023-06-01"
OPENING_TURN = "(conversation continues)"

# Error event types that mean "busy or broken right now", not "your request is wrong".
_TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


class AnthropicProvider(HTTPProvider):
    name = "anthropic"
    path = "/v1/messages"

    @staticmethod
    def decoder() -> _EventDecoder:
        return _EventDecoder()

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def body(self, prompt: Prompt) -> dict[str, Any]:
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
        self._counts: dict[str, int] = {}  # the usage fields, as the stream updates them

    @property
    def complete(self) -> bool:
        return self.finished

    @property
    def usage(self) -> Usage | None:
        counts = self._counts
        if not counts:
            return None
        cached = counts.get("cache_read_input_tokens", 0)
        # Anthropic counts cache reads and writes apart from `input_tokens`.
        prompt = counts.get("input_tokens", 0) + cached
        prompt += counts.get("cache_creation_input_tokens", 0)
        return Usage(prompt=prompt, cached=cached, completion=counts.get("output_tokens", 0))

    def feed(self, event: SSEEvent) -> str:
        payload = parse_json(event)
        kind = payload.get("type", event.event)
        if kind == "message_start":
            message = payload.get("message")
            self._count(message.get("usage") if isinstance(message, dict) else None)
        elif kind == "message_delta":
            self._count(payload.get("usage"))  # the output tokens so far
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            raise _error_event(payload)
        elif kind == "content_block_delta":
            return _delta_text(payload)
        return ""

    def _count(self, usage: object) -> None:
        if isinstance(usage, dict):
            self._counts |= {k: v for k, v in usage.items() if isinstance(v, int) and v >= 0}


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
