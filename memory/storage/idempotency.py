"""Repository for idempotency keys: a POST sent twice is carried out once.

The first request with a key claims it; the answer is stored with the claim, and a
replay within the key's lifetime gets that answer back. Kept in the database, not in
a process, so a replay that lands on another replica is answered the same.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.inserts import insert_or_skip
from memory.storage.models import IdempotentRequest


@dataclass(frozen=True, slots=True)
class Claimed:
    """The key is ours: carry the request out, then `finish` (or `release` on failure)."""


@dataclass(frozen=True, slots=True)
class Replay:
    status_code: int
    response: str


@dataclass(frozen=True, slots=True)
class KeyConflict:
    # "mismatch": the key came with another request; "in progress": its first request
    # has not been answered yet.
    reason: str


Claim = Claimed | Replay | KeyConflict


class IdempotencyKeys:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def claim(
        self,
        key_hash: str,
        request_hash: str,
        *,
        now: datetime,
        ttl: timedelta,
        hold: timedelta,
    ) -> Claim:
        """Claim `key_hash` for `hold` (the longest a request may take), or say why not."""
        async with self._sessions() as session:
            # Expired keys go first: both so this one may be reused and so the table
            # holds one key lifetime of requests, not every request ever made.
            await session.execute(
                delete(IdempotentRequest).where(IdempotentRequest.expires_at <= now)
            )
            inserted = await session.execute(
                insert_or_skip(session, IdempotentRequest)
                .values(
                    key_hash=key_hash,
                    request_hash=request_hash,
                    claimed_until=now + hold,
                    expires_at=now + ttl,
                )
                .returning(IdempotentRequest.key_hash)
            )
            if inserted.first() is not None:
                await session.commit()
                return Claimed()
            row = await session.get(IdempotentRequest, key_hash, with_for_update=True)
            if row is None:  # it expired and another request removed it just now
                return KeyConflict("in progress")
            if row.request_hash != request_hash:
                return KeyConflict("mismatch")
            if row.status_code is not None and row.response is not None:
                return Replay(row.status_code, row.response)
            if row.claimed_until > now:
                return KeyConflict("in progress")
            row.claimed_until = now + hold  # its first request died unanswered: ours now
            await session.commit()
            return Claimed()

    async def finish(
        self, key_hash: str, status_code: int, response: str, subject: uuid.UUID | None
    ) -> None:
        """Keep the answer; `subject`: the conversation or person it is about."""
        async with self._sessions() as session:
            await session.execute(
                update(IdempotentRequest)
                .where(IdempotentRequest.key_hash == key_hash)
                .values(status_code=status_code, response=response, subject=subject)
            )
            await session.commit()

    async def release(self, key_hash: str) -> None:
        """Forget an unanswered claim, so the request can be tried again at once."""
        async with self._sessions() as session:
            await session.execute(
                delete(IdempotentRequest).where(
                    IdempotentRequest.key_hash == key_hash,
                    IdempotentRequest.status_code.is_(None),
                )
            )
            await session.commit()
