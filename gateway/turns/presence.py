"""Showing the person that a reply is being written (typing indicators).

Platforms show "typing…" for a few seconds per request, so it is repeated for as long
as the model works. A failed indicator is not worth a retry or a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

import structlog

from gateway.errors import DeliveryError
from gateway.messages import ChatRef

log = structlog.get_logger(__name__)


@runtime_checkable
class ShowsTyping(Protocol):
    # Seconds between two indicators, a little under how long the platform shows one.
    typing_interval: float

    async def typing(self, chat: ChatRef) -> None: ...


@contextlib.asynccontextmanager
async def typing_while(sender: ShowsTyping, chat: ChatRef) -> AsyncIterator[None]:
    task = asyncio.create_task(_keep_typing(sender, chat), name=f"typing:{chat.channel}")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _keep_typing(sender: ShowsTyping, chat: ChatRef) -> None:
    while True:
        try:
            await sender.typing(chat)
        except DeliveryError as exc:
            log.debug("typing indicator failed", channel=chat.channel, error=exc.reason)
        await asyncio.sleep(sender.typing_interval)
