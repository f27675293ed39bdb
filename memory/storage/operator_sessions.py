"""Repository for operator sessions: the dashboard's sign-ins, kept as hashes.

A one-time sign-in link is kept the same way, under an admin key of its own kind (so it
never passes for a session), and is spent by the first request that redeems it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.models import OperatorSession


@dataclass(frozen=True, slots=True)
class OpenSession:
    admin_key: str
    expires_at: datetime


class OperatorSessions:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def open(self, token_hash: str, admin_key: str, *, now: datetime, ttl: timedelta) -> None:
        """A new session; the expired ones go (sign-ins are rare: a cheap place to tidy)."""
        async with self._sessions() as session:
            await session.execute(delete(OperatorSession).where(OperatorSession.expires_at <= now))
            session.add(
                OperatorSession(
                    token_hash=token_hash,
                    admin_key=admin_key,
                    created_at=now,
                    expires_at=now + ttl,
                )
            )
            await session.commit()

    async def find(self, token_hash: str, *, now: datetime) -> OpenSession | None:
        async with self._sessions() as session:
            row = await session.scalar(
                select(OperatorSession).where(
                    OperatorSession.token_hash == token_hash, OperatorSession.expires_at > now
                )
            )
        return None if row is None else OpenSession(row.admin_key, row.expires_at)

    async def close(self, token_hash: str) -> None:
        async with self._sessions() as session:
            await session.execute(
                delete(OperatorSession).where(OperatorSession.token_hash == token_hash)
            )
            await session.commit()

    async def redeem(self, token_hash: str, admin_key: str, *, now: datetime) -> bool:
        """Spend a one-time entry: True for the one request that finds it unexpired."""
        async with self._sessions() as session:
            spent = await session.execute(
                delete(OperatorSession).where(
                    OperatorSession.token_hash == token_hash,
                    OperatorSession.admin_key == admin_key,
                    OperatorSession.expires_at > now,
                )
            )
            await session.commit()
        return bool(getattr(spent, "rowcount", 0) == 1)
