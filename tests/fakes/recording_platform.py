"""A platform connector that takes every call at once and records it: for the delivery
loop and the outbox driven directly, where the platform's wire format is not the
point (the connectors' own tests use the platforms' fakes)."""

from __future__ import annotations

import asyncio

from gateway.channels.port import Capabilities, Pace
from gateway.envelopes import ChatRef, Outbound


class RecordingPlatform:
    """A platform that takes everything, and says where it went."""

    channel = "telegram"
    capabilities = Capabilities(max_length=4096, typing_interval=60.0)

    def __init__(self) -> None:
        self.typing_in: list[str] = []
        self.sent: list[tuple[str, str]] = []
        self.typed = asyncio.Event()

    async def typing(self, chat: ChatRef) -> None:
        self.typing_in.append(chat.external_user_id)
        self.typed.set()

    async def send(self, outbound: Outbound) -> str:
        self.sent.append((outbound.external_user_id, outbound.text))
        return f"{outbound.external_user_id}:{len(self.sent)}"

    def pacing(self, outbound: Outbound) -> list[Pace]:
        return []
