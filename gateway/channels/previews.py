"""A reply shown while it is written, on a messaging app (DESIGN §10): one place for
every connector that can show one, paced, and never in the way of the reply itself.

A turn hands each piece of its answer that is clearly an answer (the hold-back rule of
the turn's answer: a preamble before a tool call is never shown) to `Preview.add`; a
model call that starts again (after a tool call) `restart`s it. A paced task sends the
text so far as a draft (Telegram's `sendMessageDraft`, private chats), at most one per
interval; a draft the platform refuses ends the previews of that reply (the typing
indicator goes on as before). The reply itself goes through the outbox as always:
drafts vanish by themselves, so a crash leaves nothing half-sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Protocol

import structlog

from gateway.envelopes import ChatRef
from gateway.errors import DeliveryError
from gateway.metrics import Metrics
from gateway.tasks import alongside
from gateway.turns.presence import Preview

log = structlog.get_logger(__name__)


class Drafting(Protocol):
    """A connector that shows a reply being written as a draft."""

    channel: str

    def cut(self, text: str) -> str:
        """What of `text` one draft can show."""
        ...

    async def draft(self, chat: ChatRef, draft_id: int, text: str) -> None:
        """Show `text` as draft `draft_id` (the same id replaces it in place)."""
        ...


class DraftPreview(Preview):
    def __init__(self, sender: Drafting, chat: ChatRef, interval: float, metrics: Metrics) -> None:
        self._sender = sender
        self._chat = chat
        self._interval = interval
        self._metrics = metrics
        self._text = ""
        self._shown = ""
        self._draft_id = _new_id()
        self._changed = asyncio.Event()
        self._stopped = False

    def add(self, text: str) -> None:
        if self._stopped:
            return
        if self._changed.is_set():  # the draft after next shows it, with what comes
            self._count("throttled")
        self._text += text
        self._changed.set()

    def restart(self) -> None:
        # A new draft id replaces what was shown with what comes next.
        self._text, self._shown, self._draft_id = "", "", _new_id()
        self._changed.clear()

    async def run(self) -> None:
        """Send the text so far, then wait out the interval, until cancelled."""
        while not self._stopped:
            await self._changed.wait()
            self._changed.clear()
            text = self._sender.cut(self._text)
            if not text.strip() or text == self._shown:
                continue
            try:
                await self._sender.draft(self._chat, self._draft_id, text)
            except DeliveryError as exc:
                # The typing indicator shows for the rest of this reply.
                self._stopped = True
                self._count("dropped")
                log.info("draft refused; previews of this reply stop", error=exc.reason)
                return
            self._shown = text
            self._count("sent")
            await asyncio.sleep(self._interval)

    def _count(self, outcome: str) -> None:
        self._metrics.stream_previews.labels(self._sender.channel, outcome).inc()


@contextlib.asynccontextmanager
async def drafting(
    sender: Drafting, chat: ChatRef, interval: float, metrics: Metrics
) -> AsyncIterator[Preview]:
    """A draft preview of the reply written meanwhile."""
    preview = DraftPreview(sender, chat, interval, metrics)
    async with alongside(preview.run(), f"drafts:{chat.channel}"):
        yield preview


def _new_id() -> int:
    return secrets.randbelow(2**31 - 1) + 1
