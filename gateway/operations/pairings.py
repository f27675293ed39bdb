"""Access requests on a `pairing` channel, as an operator answers them: the ones
waiting, approving one (the person is in for good), rejecting one (forgotten)."""

from __future__ import annotations

from datetime import datetime

from gateway.clock import Clock
from gateway.errors import Gone, NotFound
from memory.storage.pairing import Approval, Pairing, Pairings


class PairingRequests:
    def __init__(self, *, pairings: Pairings, clock: Clock) -> None:
        self._pairings = pairings
        self._clock = clock

    async def waiting(self, *, after: tuple[datetime, str] | None, limit: int) -> list[Pairing]:
        """Oldest first: who asked first is answered first."""
        return await self._pairings.pending_pairings(
            now=self._clock.now(), after=after, limit=limit
        )

    async def approve(self, code: str) -> Pairing:
        """`Gone` once the code has expired."""
        outcome, pairing = await self._pairings.approve_pairing(code, now=self._clock.now())
        if pairing is None or outcome is Approval.UNKNOWN:
            raise NotFound("pairing request")
        if outcome is Approval.EXPIRED:
            raise Gone("the code has expired; the person gets a new one by writing")
        return pairing

    async def reject(self, code: str) -> Pairing:
        pairing = await self._pairings.reject_pairing(code)
        if pairing is None:
            raise NotFound("pairing request waiting")
        return pairing
