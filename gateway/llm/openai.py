"""Any OpenAI-compatible chat completions server (OpenAI, vLLM, llama.cpp, Ollama, ...)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.llm.base import Prompt
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

_DONE = "[DONE]"


class OpenAIProvider:
    name = "openai"

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
        self._url = f"{base_url.rstrip('/')}/chat/completions"
        self._api_key = api_key
        self._model = model
        self._policy = RetryPolicy(max_retries, retry_base_seconds)
        self._client = new_client(timeout)

    def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        return stream_text(self._client, self._request(prompt), _ChunkDecoder, self._policy)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _request(self, prompt: Prompt) -> StreamRequest:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        return StreamRequest(self.name, self._url, headers, self._body(prompt), self._api_key)

    def _body(self, prompt: Prompt) -> dict[str, Any]:
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
        self.finished = False

    def feed(self, event: SSEEvent) -> str:
        if event.data.strip() == _DONE:
            self.finished = True
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
        # `[DONE]`; a finish_reason is as good an end marker.
        if _finish_reason(chunk):
            self.finished = True
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
