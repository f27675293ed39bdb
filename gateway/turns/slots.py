"""Turn slots: how many turns of one replica do the gateway's own work at once, and
when they may do it.

A turn's own work (reading the conversation and its memory, writing the prompt,
storing the reply, handing it to delivery) is CPU on the event loop that also
acknowledges the platforms' webhooks; a burst of messages that started that work for
every conversation at once would keep the next acknowledgements waiting behind it. A
turn takes a slot for its work and lends it while it waits for the model, which takes
no CPU here however long it takes. Conversations that wait for a slot are served in
the order they asked; their messages are stored, so nothing waits in memory only.

Arrivals come first: while messages are being stored (`Arrivals.arriving`), a turn
that would take a slot waits for a pause in them, for at most `patience` seconds, so
that a platform waiting on its acknowledgement never waits behind a turn's work. A
burst is answered after it, with fewer turns (each answers what its conversation said
meanwhile); the patience keeps turns going under arrivals that never stop. The
embedded job runner waits for the same pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Iterator

PATIENCE_SECONDS = 2.0
# How long after the last arrival the gateway counts as quiet: long enough that
# arrivals a few milliseconds apart (a burst) keep turns waiting between them.
QUIET_SECONDS = 0.025


class Arrivals:
    """Whether messages are arriving: the work that can wait (turns, background jobs)
    waits for a pause in them."""

    def __init__(self, *, patience: float = PATIENCE_SECONDS, quiet: float = QUIET_SECONDS) -> None:
        self._patience = patience
        self._quiet_after = quiet
        self._arriving = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._quieting: asyncio.TimerHandle | None = None
        self._last_stored = -math.inf

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """Around storing a message that a platform waits to have acknowledged."""
        self._arriving += 1
        self._quiet.clear()
        if self._quieting is not None:
            self._quieting.cancel()
            self._quieting = None
        try:
            yield
        finally:
            self._arriving -= 1
            loop = asyncio.get_running_loop()
            now, last = loop.time(), self._last_stored
            self._last_stored = now
            if not self._arriving:
                if now - last < self._quiet_after:  # a burst: more may follow at once
                    self._quieting = loop.call_later(self._quiet_after, self._quiet.set)
                else:  # a message on its own: its turn need not wait
                    self._quiet.set()

    async def pause(self) -> None:
        """Until no message has arrived for a moment, or `patience` seconds at most."""
        if self._quiet.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._patience):
                await self._quiet.wait()


class TurnSlots:
    def __init__(self, size: int, arrivals: Arrivals | None = None) -> None:
        self._free = asyncio.Semaphore(size)
        self.arrivals = arrivals or Arrivals()
        self.in_use = 0

    @contextlib.asynccontextmanager
    async def taken(self) -> AsyncIterator[Slot]:
        await self._take()
        slot = Slot(self)
        try:
            yield slot
        finally:
            if slot.held:
                self._give_back()

    async def _take(self) -> None:
        await self._free.acquire()
        try:
            await self.arrivals.pause()
        except BaseException:  # cancelled while waiting: the slot was never used
            self._free.release()
            raise
        self.in_use += 1

    def _give_back(self) -> None:
        self.in_use -= 1
        self._free.release()


class Slot:
    """A turn's slot, from `TurnSlots.taken` until the turn ends."""

    def __init__(self, slots: TurnSlots) -> None:
        self._slots = slots
        self.held = True

    @contextlib.asynccontextmanager
    async def lent(self) -> AsyncIterator[None]:
        """Let another turn work while this one waits (for the model), and wait for a
        slot again after; a turn being stopped meanwhile needs none to stop."""
        self._slots._give_back()
        self.held = False
        stopped = False
        try:
            yield
        except asyncio.CancelledError:
            stopped = True
            raise
        finally:
            if not stopped:
                await self._slots._take()  # cancelled here: not held, not given back
                self.held = True
