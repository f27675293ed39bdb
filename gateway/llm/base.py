"""The one interface every language-model provider implements.

`ChatTurn` comes from `memory.context`, which assembles the turns a provider is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from memory.chat_turn import ChatTurn, ImagePart
from memory.model_usage import Usage

__all__ = [
    "MAX_NAME_CHARS",
    "ChatTurn",
    "ImagePart",
    "LLMProvider",
    "Piece",
    "Prompt",
    "Tool",
    "ToolCall",
    "ToolStep",
    "Usage",
    "UsageSink",
    "complete",
    "complete_counted",
]

# What is kept of a tool's name as a model wrote it: a model can make one up, of any
# length, and it is said back, stored (a column of 64) and shown again. A real tool's
# name is far shorter.
MAX_NAME_CHARS = 64


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may ask the runtime to call."""

    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON Schema of the arguments, an object


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for, whole (its arguments arrive in pieces)."""

    id: str
    name: str  # at most MAX_NAME_CHARS (a longer one is cut where a reply is read)
    arguments: str  # JSON text as the model wrote it: it may not parse


@dataclass(frozen=True, slots=True)
class ToolStep:
    """A model call that asked for tools, and what each call returned, in order."""

    text: str  # what the model wrote before its calls (often "")
    calls: tuple[ToolCall, ...]
    results: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Prompt:
    """Everything one model call sees. `system` is built once per turn and reused verbatim."""

    system: str
    turns: tuple[ChatTurn, ...]
    max_tokens: int
    model: str | None = None  # None: the provider's configured chat model
    # The tools of the turn, the same on every call of it; `steps` follow `turns`.
    tools: tuple[Tool, ...] = ()
    steps: tuple[ToolStep, ...] = ()


# What a stream yields: reply text as it arrives, then any tool calls, each complete,
# then the call's usage if the server counted it.
Piece = str | ToolCall | Usage


# Where a provider reports each call's usage (the gateway's metrics).
UsageSink = Callable[[Usage], None]


class LLMProvider(Protocol):
    name: str
    # The model it asks unless a prompt names another: what is stored on its replies.
    model: str
    # Whether its model can call tools: a turn offers the recall tools, and tells of
    # them in its system prompt, only then.
    offers_tools: bool
    # Whether its model is shown images as themselves (PARLEY_LLM_VISION); a model
    # that is not is told of them in words only.
    sees_images: bool

    def image_tokens(self, width: int, height: int) -> int:
        """What an image of this size costs a prompt, by the provider's own formula."""
        ...

    def stream(self, prompt: Prompt) -> AsyncIterator[Piece]:
        """Yield the reply's text as it arrives, then the tool calls the model asked for
        (only with `prompt.tools`; a provider may offer none), then the call's `Usage`
        where the server said it.

        Raises `LLMUnavailable` once bounded retries are spent. Retries happen only
        before the first piece is yielded, so nothing is ever repeated.
        """
        ...

    async def aclose(self) -> None: ...


async def complete(provider: LLMProvider, prompt: Prompt) -> str:
    """The whole reply as one string (for callers that cannot show a stream, and offer
    no tools)."""
    text, _ = await complete_counted(provider, prompt)
    return text


async def complete_counted(provider: LLMProvider, prompt: Prompt) -> tuple[str, list[Usage]]:
    """The whole reply as one string, and the usage of the call that wrote it."""
    text: list[str] = []
    usage: list[Usage] = []
    async for piece in provider.stream(prompt):
        if isinstance(piece, str):
            text.append(piece)
        elif isinstance(piece, Usage):
            usage.append(piece)
    return "".join(text), usage
