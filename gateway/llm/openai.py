"""Any OpenAI-compatible chat completions server (OpenAI, vLLM, llama.cpp, Ollama, ...)."""

from __future__ import annotations

from typing import Any

from gateway.llm.base import Prompt, Usage
from gateway.llm.http import HTTPProvider, SSEEvent, StreamFailed, error_message, parse_json

_DONE = "[DONE]"


class OpenAIProvider(HTTPProvider):
    name = "openai"
    path = "/chat/completions"

    @staticmethod
    def decoder() -> _ChunkDecoder:
        return _ChunkDecoder()

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def body(self, prompt: Prompt) -> dict[str, Any]:
        # The system prompt goes first and byte-identical every turn: automatic prompt
        # caching only matches an unchanged prefix.
        messages = [{"role": "system", "content": prompt.system}]
        messages += [{"role": turn.role, "content": turn.content} for turn in prompt.turns]
        return {
            "model": prompt.model or self._model,
            "messages": messages,
            "max_tokens": prompt.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }


class _ChunkDecoder:
    def __init__(self) -> None:
        self.complete = False
        self.finished = False
        self.usage: Usage | None = None

    def feed(self, event: SSEEvent) -> str:
        if event.data.strip() == _DONE:
            self.complete = self.finished = True
            return ""
        chunk = parse_json(event)
        if "error" in chunk:
            # Some compatible servers report a failure inside an already-started stream.
            raise StreamFailed(
                "openai stream reported an error",
                detail=error_message(chunk) or str(chunk["error"]),
                retryable=False,
            )
        # Some compatible servers close the stream after the finishing chunk without
        # `[DONE]`; a finish_reason is as good an end marker. The usage (asked for with
        # `include_usage`) comes in a chunk of its own after it.
        if _finish_reason(chunk):
            self.complete = True
        if (usage := _usage(chunk)) is not None:
            self.usage = usage
            self.finished = self.complete
        return _delta_text(chunk)


def _first_choice(chunk: dict[str, Any]) -> dict[str, Any]:
    choices = chunk.get("choices")
    # The final usage chunk has no choices.
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def _delta_text(chunk: dict[str, Any]) -> str:
    delta = _first_choice(chunk).get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""


def _finish_reason(chunk: dict[str, Any]) -> bool:
    return bool(_first_choice(chunk).get("finish_reason"))


def _usage(chunk: dict[str, Any]) -> Usage | None:
    usage = chunk.get("usage")
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return Usage(
        prompt=_count(usage.get("prompt_tokens")),
        cached=_count(cached),
        completion=_count(usage.get("completion_tokens")),
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0
