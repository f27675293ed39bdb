"""The provider used when no model is configured: honest, deterministic, no network."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gateway.llm.base import Piece, Prompt

OFFLINE = "offline"


class OfflineProvider:
    name = OFFLINE
    model = OFFLINE
    offers_tools = False
    sees_images = False

    def image_tokens(self, width: int, height: int) -> int:
        return 0

    async def stream(self, prompt: Prompt) -> AsyncIterator[Piece]:
        # The reply is text only, whatever `prompt.tools` holds.
        for piece in offline_reply(prompt):
            yield piece
            # Let other tasks run between pieces, as they would with a real stream.
            await asyncio.sleep(0)

    async def aclose(self) -> None:
        """Nothing to release."""


def offline_reply(prompt: Prompt) -> list[str]:
    """The reply in the pieces it is streamed in. It never claims to have read the message."""
    count = sum(1 for turn in prompt.turns if turn.role == "user")
    noun = "message" if count == 1 else "messages"
    return [
        "No language model is configured, so I can't read or answer messages yet. ",
        "Your message was stored and is part of this conversation; ",
        f"the prompt built for this reply holds {count} user {noun}. ",
        "To get real replies, set PARLEY_LLM_PROVIDER (openai or anthropic), "
        "PARLEY_LLM_BASE_URL, PARLEY_LLM_API_KEY and PARLEY_LLM_MODEL, then restart Parley.",
    ]
