"""A reply shown while it is written, on a messaging app (DESIGN §10): one place for
every connector that can show one, paced, and never in the way of the reply itself.

A turn hands each piece of its answer that is clearly an answer (the hold-back rule of
the turn's answer: a preamble before a tool call is never shown) to `Preview.add`; a
model call that starts again (after a tool call) `restart`s it. A paced task shows the
text so far, at most once per interval, in one of two ways:

- as a draft (Telegram's `sendMessageDraft`, private chats): drafts vanish by
  themselves, and the reply itself goes through the outbox as always, so a crash
  leaves nothing half-sent;
- as one message, sent once and then edited (Telegram groups, Discord, where the
  operator turns it on). The message is recorded as soon as the platform takes it;
  the reply's first part is edited into it by the outbox, and a turn run again after
  a crash takes it over (`Previews.adopt`), so the reply never arrives twice.

Whatever the platform refuses ends the previews of that reply (the typing indicator
goes on as before); a 429 also holds that chat's sends for as long as the platform
asks, so the reply's parts respect it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

import structlog

from gateway.envelopes import ChatRef
from gateway.errors import DeliveryError
from gateway.metrics import Metrics
from gateway.tasks import alongside
from gateway.turns.presence import Preview
from memory.storage.previews import PreviewPlace, Previews

log = structlog.get_logger(__name__)


class Shows(Protocol):
    channel: str

    def cut(self, text: str) -> str:
        """What of `text` one preview can show (its first part, as it will be sent)."""
        ...


class Drafting(Shows, Protocol):
    """A connector that shows a reply being written as a draft."""

    async def draft(self, chat: ChatRef, draft_id: int, text: str) -> None:
        """Show `text` as draft `draft_id` (the same id replaces it in place)."""
        ...


class Editing(Shows, Protocol):
    """A connector that shows a reply being written in one message, edited."""

    def edit_interval(self, chat: ChatRef) -> float:
        """The least time between two edits of one message in `chat` that the
        platform's limits allow, with room left for the reply itself."""
        ...

    async def open_preview(self, chat: ChatRef, text: str) -> str:
        """Send `text` as a new message in `chat`; its platform id."""
        ...

    async def edit_preview(self, chat: ChatRef, platform_id: str, text: str) -> None:
        """Show `text` in the message `platform_id` instead."""
        ...


class _PacedPreview(Preview):
    def __init__(self, sender: Shows, interval: float, metrics: Metrics) -> None:
        self._sender = sender
        self._interval = interval
        self._metrics = metrics
        self._text = ""
        self.shown: str | None = ""
        # Looked up once: a reply adds a few hundred pieces, most of them throttled.
        self._throttled = metrics.stream_previews.labels(sender.channel, "throttled")
        self._changed = asyncio.Event()
        self._stopped = False
        # Held while a call to the platform is in flight.
        self._calling = asyncio.Lock()

    def add(self, text: str) -> None:
        if self._stopped:
            return
        if self._changed.is_set():  # the preview after next shows it, with what comes
            self._throttled.inc()
        self._text += text
        self._changed.set()

    def restart(self) -> None:
        self._text = ""
        self._changed.clear()

    async def run(self) -> None:
        """Show the text so far, then wait out the interval, until stopped."""
        while not self._stopped:
            await self._changed.wait()
            self._changed.clear()
            text = self._sender.cut(self._text)
            if not text.strip() or text == self.shown:
                continue
            async with self._calling:
                if self._stopped:
                    return
                try:
                    await self._show(text)
                except DeliveryError as exc:
                    await self._drop(exc)
                    return
                except Exception:
                    # A preview must never cost the reply (the database may be down).
                    log.exception("a preview failed; previews of this reply stop")
                    await self._drop(DeliveryError("the preview failed"))
                    return
            self.shown = text
            self._count("sent")
            await asyncio.sleep(self._interval)

    async def settle(self) -> None:
        """No more previews; returns once a call in flight has its answer (so it never
        lands after the reply)."""
        self._stopped = True
        async with self._calling:
            pass

    async def _show(self, text: str) -> None:
        raise NotImplementedError

    async def _drop(self, exc: DeliveryError) -> None:
        # The typing indicator shows for the rest of this reply.
        self._stopped = True
        self._count("dropped")
        log.info("preview refused; previews of this reply stop", error=exc.reason)

    def _count(self, outcome: str) -> None:
        self._metrics.stream_previews.labels(self._sender.channel, outcome).inc()


class DraftPreview(_PacedPreview):
    def __init__(self, sender: Drafting, chat: ChatRef, interval: float, metrics: Metrics) -> None:
        super().__init__(sender, interval, metrics)
        self._drafts = sender
        self._chat = chat
        self._draft_id = _new_id()

    def restart(self) -> None:
        # A new draft id replaces what was shown with what comes next.
        super().restart()
        self.shown, self._draft_id = "", _new_id()

    async def _show(self, text: str) -> None:
        await self._drafts.draft(self._chat, self._draft_id, text)


class EditPreview(_PacedPreview):
    def __init__(
        self,
        sender: Editing,
        chat: ChatRef,
        place: PreviewPlace,
        previews: Previews,
        penalty: Callable[[float], Awaitable[None]],
        interval: float,
        metrics: Metrics,
    ) -> None:
        super().__init__(sender, max(interval, sender.edit_interval(chat)), metrics)
        self._edits = sender
        self._chat = chat
        self._place = place
        self._previews = previews
        self._penalty = penalty
        self.platform_id: str | None = None

    async def adopt(self) -> None:
        """Take over the preview a crashed run of this turn left, if there is one: what
        it shows is not known."""
        self.platform_id = await self._previews.adopt(self._place)
        if self.platform_id is not None:
            self.shown = None

    async def _show(self, text: str) -> None:
        if self.platform_id is not None:
            await self._edits.edit_preview(self._chat, self.platform_id, text)
            return
        platform_id = await self._edits.open_preview(self._chat, text)
        self.platform_id = platform_id
        # Before the next edit: from here on a restart finishes this message.
        await self._previews.record(self._place, platform_id)

    async def _drop(self, exc: DeliveryError) -> None:
        await super()._drop(exc)
        if exc.retry_after is not None:
            await self._penalty(exc.retry_after)


@contextlib.asynccontextmanager
async def drafting(
    sender: Drafting, chat: ChatRef, interval: float, metrics: Metrics
) -> AsyncIterator[Preview]:
    """A draft preview of the reply written meanwhile."""
    preview = DraftPreview(sender, chat, interval, metrics)
    async with alongside(preview.run(), f"drafts:{chat.channel}"):
        try:
            yield preview
        finally:
            await preview.settle()


@contextlib.asynccontextmanager
async def editing(
    preview: EditPreview, shown: Callable[[str, str], None]
) -> AsyncIterator[Preview]:
    """An edited preview of the reply written meanwhile; `shown` is told what the
    message shows once previews stop (the reply's first part may need no edit)."""
    await preview.adopt()
    async with alongside(preview.run(), "previews"):
        try:
            yield preview
        finally:
            await preview.settle()
    if preview.platform_id is not None and preview.shown is not None:
        shown(preview.platform_id, preview.shown)


def _new_id() -> int:
    return secrets.randbelow(2**31 - 1) + 1
