"""Idempotency keys of operator requests: a request sent twice is carried out once.

A key's first request claims it and its answer is kept for 24 h (in the database, so
every replica answers a replay the same); a claim whose request failed is released,
so the client may simply try again.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from gateway.clock import Clock
from memory.storage.idempotency import Claim, IdempotencyKeys

KEY_LIFETIME = timedelta(hours=24)
# Longer than any operator request takes; a claim whose process died lapses after it.
CLAIM_HOLD = timedelta(minutes=5)


class Idempotency:
    def __init__(self, *, keys: IdempotencyKeys, clock: Clock) -> None:
        self._keys = keys
        self._clock = clock

    async def claim(self, key_hash: str, request_hash: str) -> Claim:
        """Claimed (run it), a Replay of the kept answer, or a KeyConflict."""
        return await self._keys.claim(
            key_hash, request_hash, now=self._clock.now(), ttl=KEY_LIFETIME, hold=CLAIM_HOLD
        )

    async def finish(
        self, key_hash: str, status_code: int, response: str, subject: uuid.UUID | None
    ) -> None:
        """Keep the answer; `subject`: the conversation or person it is about, whose
        erasure takes the kept answer with it."""
        await self._keys.finish(key_hash, status_code, response, subject)

    async def release(self, key_hash: str) -> None:
        await self._keys.release(key_hash)
