"""The one interface every language-model provider implements.

`ChatTurn` comes from `memory.context`, which assembles the turns a provider is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from memory.chat_turn import ChatTurn

__all__ = ["ChatTurn", "LLMProvider", "Prompt", "Usage", "UsageSink", "complete"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """Everything one model call sees. `system` is built once per turn and reused verbatim."""

    system: str
    turns: tuple[ChatTurn, ...]
    max_tokens: int
    model: str | None = None  # None: the provider's configured chat model


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one model call took, as the server counted them."""

    prompt: int  # every prompt token, the cached ones included
    cached: int  # of those, read from the server's prompt cache
    completion: int


# Where a provider reports each call's usage (the gateway's metrics).
UsageSink = Callable[[Usage], None]


class LLMProvider(Protocol):
    name: str

    def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        """Yield the reply's text as it arrives.

        Raises `LLMUnavailable` once bounded retries are spent. Retries happen only
        before the first piece of text is yielded, so no text is ever repeated.
        """
        ...

    async def aclose(self) -> None: ...


async def complete(provider: LLMProvider, prompt: Prompt) -> str:
    """The whole reply as one string (for callers that cannot show a stream)."""
    return "".join([piece async for piece in provider.stream(prompt)])
