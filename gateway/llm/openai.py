"""Any OpenAI-compatible chat completions server (OpenAI, vLLM, llama.cpp, Ollama, ...)."""

from __future__ import annotations

import base64
import math
from typing import Any

from gateway.llm.base import ChatTurn, Prompt, Tool, ToolCall, ToolStep, Usage
from gateway.llm.http import (
    CallAssembler,
    HTTPProvider,
    SSEEvent,
    StreamFailed,
    error_message,
    parse_json,
)

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
        messages: list[dict[str, Any]] = [{"role": "system", "content": prompt.system}]
        messages += [self._message(turn) for turn in prompt.turns]
        for step in prompt.steps:
            messages += _step_messages(step)
        body: dict[str, Any] = {
            "model": prompt.model or self.model,
            "messages": messages,
            "max_tokens": prompt.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if prompt.tools:
            body["tools"] = [_tool(tool) for tool in prompt.tools]
        return body

    def _message(self, turn: ChatTurn) -> dict[str, Any]:
        if not (turn.images and self.sees_images):
            return {"role": turn.role, "content": turn.content}
        parts: list[dict[str, Any]] = [{"type": "text", "text": turn.content}]
        for image in turn.images:
            url = f"data:{image.mime};base64,{base64.b64encode(image.data).decode()}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return {"role": turn.role, "content": parts}

    def image_tokens(self, width: int, height: int) -> int:
        return openai_image_tokens(width, height)


def openai_image_tokens(width: int, height: int) -> int:
    """OpenAI's count for an image at full detail: fitted in 2048 px, its shorter side
    brought down to 768, then 170 a 512 px tile and 85 besides."""
    if width <= 0 or height <= 0:
        return 85
    fitted = min(1.0, 2048 / max(width, height))
    scale = fitted * min(1.0, 768 / (min(width, height) * fitted))
    tiles = math.ceil(width * scale / 512) * math.ceil(height * scale / 512)
    return 85 + 170 * tiles


def _tool(tool: Tool) -> dict[str, Any]:
    function = {
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
    }
    return {"type": "function", "function": function}


def _step_messages(step: ToolStep) -> list[dict[str, Any]]:
    """The assistant's calls, then what each returned."""
    asked = {
        "role": "assistant",
        "content": step.text or None,
        "tool_calls": [_call(call) for call in step.calls],
    }
    results = [
        {"role": "tool", "tool_call_id": call.id, "content": result}
        for call, result in zip(step.calls, step.results, strict=True)
    ]
    return [asked, *results]


def _call(call: ToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": call.arguments}
    return {"id": call.id, "type": "function", "function": function}


class _ChunkDecoder:
    def __init__(self) -> None:
        self.complete = False
        self.finished = False
        self.usage: Usage | None = None
        self._calls = CallAssembler()

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return self._calls.calls()

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
        choice = _first_choice(chunk)
        # Some compatible servers close the stream after the finishing chunk without
        # `[DONE]`; a finish_reason is as good an end marker. The usage (asked for with
        # `include_usage`) comes in a chunk of its own after it.
        if choice.get("finish_reason"):
            self.complete = True
        if (usage := _usage(chunk)) is not None:
            self.usage = usage
            self.finished = self.complete
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        for piece in _calls_in(delta):
            self._add_call(piece)
        return _string(delta.get("content"))

    def _add_call(self, piece: dict[str, Any]) -> None:
        function = piece.get("function")
        if not isinstance(function, dict):
            function = {}
        self._calls.add(
            self._index(piece),
            id=_string(piece.get("id")),
            name=_string(function.get("name")),
            arguments=_string(function.get("arguments")),
        )

    def _index(self, piece: dict[str, Any]) -> int:
        index = piece.get("index")
        if isinstance(index, int):
            return index
        # A server that numbers no calls: an id opens a new one, other pieces go on the last.
        count = len(self._calls)
        return count if piece.get("id") or not count else count - 1


def _first_choice(chunk: dict[str, Any]) -> dict[str, Any]:
    choices = chunk.get("choices")
    # The final usage chunk has no choices.
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def _calls_in(delta: dict[str, Any]) -> list[dict[str, Any]]:
    pieces = delta.get("tool_calls")
    if not isinstance(pieces, list):
        return []
    return [piece for piece in pieces if isinstance(piece, dict)]


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


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
