"""Showing the person that a reply is being written (typing indicators, previews).

Platforms show "typing…" for a few seconds per request, so it is repeated for as long
as the model works. A failed indicator is not worth a retry or a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

import structlog

from gateway.envelopes import ChatRef
from gateway.errors import DeliveryError
from gateway.tasks import alongside

log = structlog.get_logger(__name__)


class Preview:
    """What a turn shows of its answer while it is written (nothing, here; a draft on
    a messaging app that has them: `gateway.channels.previews`)."""

    def add(self, text: str) -> None:
        """More of the answer."""

    def restart(self) -> None:
        """The model is asked again: what was shown is not the answer."""


NO_PREVIEW = Preview()


class ShowsTyping(Protocol):
    async def typing(self, chat: ChatRef) -> None: ...


@contextlib.asynccontextmanager
async def typing_while(sender: ShowsTyping, chat: ChatRef, interval: float) -> AsyncIterator[None]:
    """Repeat `sender`'s indicator every `interval` s (a little under how long the
    platform shows one) until the block ends."""
    async with alongside(_keep_typing(sender, chat, interval), f"typing:{chat.channel}"):
        yield


async def _keep_typing(sender: ShowsTyping, chat: ChatRef, interval: float) -> None:
    while True:
        try:
            await sender.typing(chat)
        except DeliveryError as exc:
            log.debug("typing indicator failed", channel=chat.channel, error=exc.reason)
        await asyncio.sleep(interval)
