"""Which replica answers a conversation: a lease in the database, one per conversation.

Within this process the lease is shared: the conversation's turn loop and a merge
(linking) may both need it; the first claims it, the last releases it. Across
processes it is exclusive, renewed while held (`gateway.replicas.lease_keeper`), and it
lapses by itself when its holder dies, so another replica can take the conversation
over. A turn's writes check the lease in their own transaction (`held`), so one that
lost it while stalled stores nothing.

Without `Leases` (an embedded SQLite database: one process by construction) every
hold is granted at once and nothing is written: replicas need a database server.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from gateway.metrics import Metrics
from gateway.replicas.lease_keeper import LeaseKeeper, keep, release
from memory.storage.leases import Held, Leases

# How often to try again while another replica holds the lease and we wait for it.
RETRY_SECONDS = 0.2


def lease_name(conversation_id: uuid.UUID) -> str:
    return f"turn:{conversation_id}"


@dataclass
class _Use:
    users: int = 0
    kept: LeaseKeeper | None = None
    keeping: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    ready: asyncio.Lock = field(default_factory=asyncio.Lock)


class ConversationLeases:
    def __init__(
        self, leases: Leases | None, ttl: timedelta, metrics: Metrics | None = None
    ) -> None:
        self._leases = leases
        self._ttl = ttl
        self._held = (metrics or Metrics()).turn_leases
        self._uses: dict[uuid.UUID, _Use] = {}

    @property
    def across_processes(self) -> bool:
        """Whether another process may store messages into a conversation we hold."""
        return self._leases is not None

    def held(self, conversation_id: uuid.UUID) -> Held | None:
        """What a write checks to commit only while the lease is still ours."""
        if self._leases is None:
            return None
        return self._leases.held(lease_name(conversation_id))

    @contextlib.asynccontextmanager
    async def hold(self, conversation_id: uuid.UUID, *, wait: float = 0.0) -> AsyncIterator[bool]:
        """Yield whether this process holds the conversation, trying for up to `wait`
        seconds while another replica has it."""
        leases = self._leases
        if leases is None:
            yield True
            return
        use = self._uses.setdefault(conversation_id, _Use())
        use.users += 1
        try:
            async with use.ready:
                if use.kept is not None and not use.kept.still_held():
                    # Lost while this process stalled: its writes are refused by the
                    # lease check; claim it anew rather than trust a lost keeper.
                    await self._stop_keeping(use)
                if use.kept is None:
                    await self._start_keeping(leases, conversation_id, use, wait)
            yield use.kept is not None
        finally:
            use.users -= 1
            if use.users == 0:
                await self._let_go(leases, conversation_id, use)

    async def _start_keeping(
        self, leases: Leases, conversation_id: uuid.UUID, use: _Use, wait: float
    ) -> None:
        name = lease_name(conversation_id)
        since = await self._claim(leases, name, wait)
        if since is None:
            return
        renew = partial(leases.renew, name, self._ttl)
        use.kept = await use.keeping.enter_async_context(
            keep(name, renew, self._ttl, since=since, now=leases.now)
        )
        self._held.inc()

    async def _stop_keeping(self, use: _Use) -> None:
        await use.keeping.aclose()
        use.kept, use.keeping = None, contextlib.AsyncExitStack()
        self._held.dec()

    async def _let_go(self, leases: Leases, conversation_id: uuid.UUID, use: _Use) -> None:
        # Under the lock: one that comes meanwhile waits, then claims anew.
        async with use.ready:
            if use.users == 0 and use.kept is not None:
                await self._stop_keeping(use)
                await release(leases, lease_name(conversation_id))
            if use.users == 0:
                self._uses.pop(conversation_id, None)

    async def _claim(self, leases: Leases, name: str, wait: float) -> datetime | None:
        """When we took the lease (None: another replica held it all along)."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait
        while True:
            since = leases.now()
            if await leases.claim(name, self._ttl):
                return since
            if loop.time() >= give_up:
                return None
            await asyncio.sleep(RETRY_SECONDS)
