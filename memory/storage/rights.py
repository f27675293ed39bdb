"""Repository for what a person may ask for themselves: a one-time link to their own
export (`/export`) and the code that confirms their erasure (`/erase`)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.codes import new_code, normalise_code
from memory.storage.models import ErasureCode, ExportLink


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Rights:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def issue_export_link(self, user_id: uuid.UUID, *, now: datetime, ttl: timedelta) -> str:
        """A token for one download of the person's export (only its hash is kept)."""
        token = secrets.token_urlsafe(32)
        async with self._sessions() as session:
            await session.execute(delete(ExportLink).where(ExportLink.expires_at <= now))
            session.add(ExportLink(token_hash=_hash(token), user_id=user_id, expires_at=now + ttl))
            await session.commit()
        return token

    async def export_link_is_open(self, token: str, *, now: datetime) -> bool:
        """Whether `token` would still open an export; spends nothing."""
        async with self._sessions() as session:
            found = await session.scalar(
                select(ExportLink.token_hash).where(
                    ExportLink.token_hash == _hash(token),
                    ExportLink.used_at.is_(None),
                    ExportLink.expires_at > now,
                )
            )
        return found is not None

    async def redeem_export_link(self, token: str, *, now: datetime) -> uuid.UUID | None:
        """The person whose export `token` opens, once; None if unknown, used or expired."""
        async with self._sessions() as session:
            user_id = await session.scalar(
                update(ExportLink)
                .where(
                    ExportLink.token_hash == _hash(token),
                    ExportLink.used_at.is_(None),
                    ExportLink.expires_at > now,
                )
                .values(used_at=now)
                .returning(ExportLink.user_id)
            )
            await session.commit()
        return user_id

    async def issue_erasure_code(self, user_id: uuid.UUID, *, now: datetime, ttl: timedelta) -> str:
        """A new confirmation code; any earlier one of the person's stops working."""
        code = new_code()
        async with self._sessions() as session:
            await session.execute(
                delete(ErasureCode).where(
                    (ErasureCode.user_id == user_id) | (ErasureCode.expires_at <= now)
                )
            )
            session.add(ErasureCode(code=code, user_id=user_id, expires_at=now + ttl))
            await session.commit()
        return code

    async def confirms_erasure(self, user_id: uuid.UUID, code: str, *, now: datetime) -> bool:
        """Whether `code` is the person's own, unexpired erasure code."""
        async with self._sessions() as session:
            found = await session.scalar(
                select(ErasureCode.code).where(
                    ErasureCode.code == normalise_code(code),
                    ErasureCode.user_id == user_id,
                    ErasureCode.expires_at > now,
                )
            )
        return found is not None
