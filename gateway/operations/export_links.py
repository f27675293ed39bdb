"""The one-time link a person's `/export` gives them: whether it still opens, and
spending it on the download."""

from __future__ import annotations

import uuid

from gateway.clock import Clock
from memory.storage.rights import Rights


class ExportLinks:
    def __init__(self, *, rights: Rights, clock: Clock) -> None:
        self._rights = rights
        self._clock = clock

    async def is_open(self, token: str) -> bool:
        """Whether `token` would still open an export; spends nothing."""
        return await self._rights.export_link_is_open(token, now=self._clock.now())

    async def redeem(self, token: str) -> uuid.UUID | None:
        """The person whose export `token` opens, once; None if it is unknown, used or
        expired (the person is shown a page saying so, not an error)."""
        return await self._rights.redeem_export_link(token, now=self._clock.now())
