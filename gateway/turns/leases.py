"""Which replica answers a conversation: a lease in the database, one per conversation.

Within this process the lease is shared: the conversation's turn loop and a merge
(linking) may both need it; the first claims it, the last releases it. Across
processes it is exclusive, renewed while held, and it lapses by itself when its
holder dies, so another replica can take the conversation over.

Without `Leases` (an embedded SQLite database: one process by construction) every
hold is granted at once and nothing is written: replicas need a database server.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

import structlog

from gateway.metrics import Metrics
from memory.storage.leases import Held, Leases

log = structlog.get_logger(__name__)

# How often to try again while another replica holds the lease and we wait for it.
RETRY_SECONDS = 0.2


def lease_name(conversation_id: uuid.UUID) -> str:
    return f"turn:{conversation_id}"


@dataclass
class _Use:
    users: int = 0
    renewer: asyncio.Task[None] | None = None
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
        name = lease_name(conversation_id)
        use = self._uses.setdefault(conversation_id, _Use())
        use.users += 1
        try:
            async with use.ready:
                mine = use.renewer is not None or await self._claim(leases, name, wait)
                if mine and use.renewer is None:
                    self._held.inc()
                    use.renewer = asyncio.create_task(self._renew(leases, name), name=name)
            yield mine
        finally:
            use.users -= 1
            if use.users == 0:
                await self._let_go(leases, conversation_id, use)

    async def _let_go(self, leases: Leases, conversation_id: uuid.UUID, use: _Use) -> None:
        # Under the lock: one that comes meanwhile waits, then claims anew.
        async with use.ready:
            if use.users == 0 and use.renewer is not None:
                use.renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await use.renewer
                use.renewer = None
                self._held.dec()
                try:
                    await leases.release(lease_name(conversation_id))
                except Exception as exc:  # unreleased, it lapses within its ttl
                    log.warning(
                        "could not release a lease",
                        conversation_id=str(conversation_id),
                        error=str(exc),
                    )
            if use.users == 0:
                self._uses.pop(conversation_id, None)

    async def _claim(self, leases: Leases, name: str, wait: float) -> bool:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait
        while not await leases.claim(name, self._ttl):
            if loop.time() >= give_up:
                return False
            await asyncio.sleep(RETRY_SECONDS)
        return True

    async def _renew(self, leases: Leases, name: str) -> None:
        while True:
            await asyncio.sleep(self._ttl.total_seconds() / 3)
            try:
                if not await leases.claim(name, self._ttl):
                    # Lapsed and taken (this process stalled): the write check refuses
                    # the reply; the new holder answers.
                    log.warning("lost a conversation's lease", lease=name)
                    return
            except Exception as exc:  # the database blinked: the next renewal may work
                log.warning("could not renew a lease", lease=name, error=str(exc))
