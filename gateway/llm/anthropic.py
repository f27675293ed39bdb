"""Anthropic's Messages API."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from gateway.llm.base import Prompt, Tool, ToolCall, ToolStep, Usage
from gateway.llm.http import (
    CallAssembler,
    HTTPProvider,
    SSEEvent,
    StreamFailed,
    error_message,
    parse_json,
)
from memory.chat_turn import ChatTurn, ImagePart

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
            "model": prompt.model or self.model,
            "max_tokens": prompt.max_tokens,
            "messages": with_steps(
                anthropic_messages(prompt.turns, images=self.sees_images), prompt.steps
            ),
            "stream": True,
        }
        if prompt.system:  # the API refuses an empty text block
            # Marking the system block lets the unchanged prefix be served from the cache.
            body["system"] = [
                {"type": "text", "text": prompt.system, "cache_control": {"type": "ephemeral"}}
            ]
        if prompt.tools:
            body["tools"] = [_tool(tool) for tool in prompt.tools]
        return body

    def image_tokens(self, width: int, height: int) -> int:
        return anthropic_image_tokens(width, height)


def anthropic_image_tokens(width: int, height: int) -> int:
    """Anthropic's count: one token per 750 pixels, and an image past about 1,600 tokens
    is scaled down to that by the API itself."""
    return min(math.ceil(width * height / 750), 1600)


def _tool(tool: Tool) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": dict(tool.parameters),
    }


def anthropic_messages(
    turns: tuple[ChatTurn, ...], *, images: bool = False
) -> list[dict[str, Any]]:
    """Turns as the API accepts them: roles alternate and the first one is the user's;
    with `images`, a turn's images go as image blocks before its text."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if not turn.content.strip() and not (images and turn.images):
            continue  # the API refuses empty content
        content: str | list[dict[str, Any]] = turn.content
        if images and turn.images:
            content = [*map(_image_block, turn.images), *_text_blocks(turn.content)]
        if not messages or messages[-1]["role"] != turn.role:
            messages.append({"role": turn.role, "content": content})
        elif isinstance(content, str) and isinstance(messages[-1]["content"], str):
            messages[-1]["content"] += "\n\n" + content
        else:
            messages[-1]["content"] = [*_blocks(messages[-1]["content"]), *_blocks(content)]
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": OPENING_TURN})
    return messages


def _image_block(image: ImagePart) -> dict[str, Any]:
    data = base64.b64encode(image.data).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": image.mime, "data": data}}


def _text_blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}] if text.strip() else []


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _text_blocks(content) if isinstance(content, str) else content


def with_steps(messages: list[dict[str, Any]], steps: tuple[ToolStep, ...]) -> list[dict[str, Any]]:
    """`messages` (as `anthropic_messages` makes them), then each step: the assistant's
    calls, and the user's message of what they returned. A message of the same role as
    the one before it joins it, as turns do, so roles keep alternating."""
    joined: list[dict[str, Any]] = list(messages)
    for step in steps:
        _append(joined, "assistant", _call_blocks(step))
        _append(joined, "user", _result_blocks(step))
    return joined


def _call_blocks(step: ToolStep) -> list[dict[str, Any]]:
    # The API refuses a text block without text.
    text = [{"type": "text", "text": step.text}] if step.text.strip() else []
    return text + [_tool_use(call) for call in step.calls]


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call)}


def _input(call: ToolCall) -> dict[str, Any]:
    # The API accepts an object only; arguments that are not one (the model's mistake,
    # kept verbatim in the call itself) are shown as none.
    try:
        value = json.loads(call.arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _result_blocks(step: ToolStep) -> list[dict[str, Any]]:
    return [
        {"type": "tool_result", "tool_use_id": call.id, "content": result}
        for call, result in zip(step.calls, step.results, strict=True)
    ]


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    last = messages[-1] if messages else None
    if last is None or last["role"] != role:
        messages.append({"role": role, "content": blocks})
        return
    content = last["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    last["content"] = [*content, *blocks]


class _EventDecoder:
    def __init__(self) -> None:
        self.finished = False
        self._counts: dict[str, int] = {}  # the usage fields, as the stream updates them
        self._calls = CallAssembler()

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return self._calls.calls()

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
        elif kind == "content_block_start":
            self._start_call(payload)
        elif kind == "content_block_delta":
            self._extend_call(payload)
            return _delta_text(payload)
        return ""

    def _start_call(self, payload: dict[str, Any]) -> None:
        block = payload.get("content_block")
        index = payload.get("index")
        if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(index, int):
            self._calls.add(index, id=_string(block.get("id")), name=_string(block.get("name")))

    def _extend_call(self, payload: dict[str, Any]) -> None:
        delta = payload.get("delta")
        index = payload.get("index")
        if not isinstance(delta, dict) or delta.get("type") != "input_json_delta":
            return
        if isinstance(index, int):
            self._calls.add(index, arguments=_string(delta.get("partial_json")))

    def _count(self, usage: object) -> None:
        if isinstance(usage, dict):
            self._counts |= {k: v for k, v in usage.items() if isinstance(v, int) and v >= 0}


def _delta_text(payload: dict[str, Any]) -> str:
    delta = payload.get("delta")
    if not isinstance(delta, dict) or delta.get("type") != "text_delta":
        return ""  # e.g. thinking or tool-input deltas, which are not reply text
    return _string(delta.get("text"))


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


def _error_event(payload: dict[str, Any]) -> StreamFailed:
    error = payload.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    return StreamFailed(
        f"anthropic stream error ({kind or 'unknown'})",
        detail=error_message(payload) or "",
        retryable=kind in _TRANSIENT_ERROR_TYPES,
    )
