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


# How long the end of a turn waits for an indicator already on its way. Cancelled
# mid-request, the call drops its connection (the next call opens one, a TLS handshake
# on a real network); and one that reaches the platform after the reply shows
# "typing…" under the answer for seconds. One round trip is the usual wait.
ARRIVING_SECONDS = 1.0


@contextlib.asynccontextmanager
async def typing_while(
    sender: ShowsTyping, chat: ChatRef, interval: float, *, arriving: float = ARRIVING_SECONDS
) -> AsyncIterator[None]:
    """Repeat `sender`'s indicator every `interval` s (a little under how long the
    platform shows one) until the block ends; an indicator on its way then is waited
    for, up to `arriving` s, so that it lands before the reply."""
    typing = _Typing(sender, chat, interval)
    task = asyncio.create_task(typing.run(), name=f"typing:{chat.channel}")
    try:
        yield
    finally:
        try:
            await typing.arrived(within=arriving)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Typing:
    def __init__(self, sender: ShowsTyping, chat: ChatRef, interval: float) -> None:
        self._sender = sender
        self._chat = chat
        self._interval = interval
        self._idle = asyncio.Event()  # no call on its way
        self._idle.set()

    async def run(self) -> None:
        while True:
            self._idle.clear()
            try:
                await self._sender.typing(self._chat)
            except DeliveryError as exc:
                log.debug("typing indicator failed", channel=self._chat.channel, error=exc.reason)
            finally:
                self._idle.set()
            await asyncio.sleep(self._interval)

    async def arrived(self, *, within: float) -> None:
        """Once no indicator is on its way, or `within` s have passed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._idle.wait()
