"""Long polling, for a machine without a public URL (`PARLEY_TELEGRAM_MODE=polling`).

The offset moves past an update only after the core committed its message, so a crash
or a database hiccup makes Telegram hand the same updates over again (they are stored
once). python-telegram-bot's own Updater confirms updates before they are processed,
which is why this small loop exists.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

import structlog
from telegram import Bot, Update
from telegram.error import Conflict, RetryAfter, TelegramError

from connectors.telegram.errors import retry_after_seconds
from gateway.sdk import InputError

log = structlog.get_logger(__name__)

# Seconds Telegram holds a getUpdates request open while there is nothing new.
LONG_POLL_SECONDS = 25
RETRY_BASE_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0

Handler = Callable[[Update], Awaitable[None]]


class Poller:
    def __init__(self, bot: Bot, handle: Handler, allowed_updates: Sequence[str]) -> None:
        self._bot = bot
        self._handle = handle
        self._allowed = list(allowed_updates)
        self._task: asyncio.Task[None] | None = None
        self._state = "connecting"

    def state(self) -> str:
        """How the polling goes: "connected" once Telegram answered the last request."""
        return self._state

    async def start(self) -> None:
        try:
            # getUpdates is refused while a webhook is set.
            await self._bot.delete_webhook()
            # Telegram answered (a long poll, with nothing new, answers only in 25 s).
            self._state = "connected"
        except TelegramError as exc:
            log.warning("could not remove the Telegram webhook", error=str(exc))
        self._task = asyncio.create_task(self._run(), name="telegram:polling")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        offset: int | None = None
        failures = 0
        while True:
            try:
                updates = await self._bot.get_updates(
                    offset=offset, timeout=LONG_POLL_SECONDS, allowed_updates=self._allowed
                )
                for update in updates:
                    try:
                        await self._handle(update)
                    except InputError as exc:
                        # It will never read better: confirm it rather than stall here.
                        log.warning("skipped an unreadable Telegram update", error=str(exc))
                    offset = update.update_id + 1
                failures = 0
                self._state = "connected"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Telegram unreachable, another poller (409), or our database down:
                # wait, then ask again from the last committed update.
                failures += 1
                delay = _delay(exc, failures)
                # The kind of failure only: a message could quote a URL with the token.
                self._state = f"reconnecting after {type(exc).__name__}"
                if isinstance(exc, Conflict):
                    log.error("another process is polling this bot, or a webhook is set")
                log.warning("Telegram polling failed", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)


def _delay(exc: Exception, failures: int) -> float:
    if isinstance(exc, RetryAfter):
        return retry_after_seconds(exc)
    return float(min(RETRY_BASE_SECONDS * 2 ** (failures - 1), RETRY_MAX_SECONDS))
