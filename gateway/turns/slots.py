"""Turn slots: how many turns of one replica do the gateway's own work at once.

A turn's own work (reading the conversation and its memory, writing the prompt,
storing the reply, handing it to delivery) is CPU on the event loop that also
acknowledges the platforms' webhooks; a burst of messages that started that work for
every conversation at once would keep the next acknowledgements waiting behind it. A
turn takes a slot for its work and lends it while it waits for the model, which takes
no CPU here however long it takes. Conversations that wait for a slot are served in
the order they asked; their messages are stored, so nothing waits in memory only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class TurnSlots:
    def __init__(self, size: int) -> None:
        self._free = asyncio.Semaphore(size)
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
