"""Repository for pairing requests: an unknown person waiting for an operator."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.codes import new_code, normalise_code
from memory.storage.inserts import insert_or_skip
from memory.storage.models import PairingRequest

_CREATE_ATTEMPTS = 3


class _Again:
    """The insert was skipped: try again."""


_AGAIN = _Again()


@dataclass(frozen=True, slots=True)
class Pairing:
    channel: str
    external_id: str
    display_name: str
    code: str
    created_at: datetime
    expires_at: datetime
    approved_at: datetime | None


def pending(now: datetime) -> ColumnElement[bool]:
    """A request still waiting for an operator: not approved, and not expired."""
    return and_(PairingRequest.approved_at.is_(None), PairingRequest.expires_at > now)


class Approval(StrEnum):
    APPROVED = "approved"
    ALREADY_APPROVED = "already approved"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


def _pairing(row: PairingRequest) -> Pairing:
    return Pairing(
        channel=row.channel,
        external_id=row.external_id,
        display_name=row.display_name,
        code=row.code,
        created_at=row.created_at,
        expires_at=row.expires_at,
        approved_at=row.approved_at,
    )


class Pairings:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def is_approved(self, channel: str, external_id: str) -> bool:
        query = select(PairingRequest.approved_at).where(
            PairingRequest.channel == channel, PairingRequest.external_id == external_id
        )
        async with self._sessions() as session:
            return (await session.scalar(query)) is not None

    async def request_pairing(
        self,
        channel: str,
        external_id: str,
        display_name: str,
        *,
        now: datetime,
        ttl: timedelta,
        cap: int,
    ) -> Pairing | None:
        """The person's live pairing code, a fresh one if theirs expired; None when the
        channel already has `cap` codes waiting for an operator."""
        for _ in range(_CREATE_ATTEMPTS):
            pairing = await self._request_pairing(
                channel, external_id, display_name, now=now, ttl=ttl, cap=cap
            )
            if not isinstance(pairing, _Again):
                return pairing
        raise RuntimeError("could not create a pairing request")

    async def _request_pairing(
        self,
        channel: str,
        external_id: str,
        display_name: str,
        *,
        now: datetime,
        ttl: timedelta,
        cap: int,
    ) -> Pairing | _Again | None:
        # One transaction from the read to the insert it decides on, so one function.
        async with self._sessions() as session:
            row = await session.scalar(
                select(PairingRequest).where(
                    PairingRequest.channel == channel, PairingRequest.external_id == external_id
                )
            )
            if row is not None and (row.approved_at is not None or row.expires_at > now):
                return _pairing(row)
            waiting = await session.scalar(
                select(func.count())
                .select_from(PairingRequest)
                .where(PairingRequest.channel == channel, pending(now))
            )
            if (waiting or 0) >= cap:
                return None
            if row is not None:  # expired: a fresh request replaces it
                await session.delete(row)
                await session.flush()
            pairing = Pairing(
                channel=channel,
                external_id=external_id,
                display_name=display_name[:200],
                code=new_code(),
                created_at=now,
                expires_at=now + ttl,
                approved_at=None,
            )
            values = {k: v for k, v in asdict(pairing).items() if k != "approved_at"}
            inserted = await session.scalar(
                insert_or_skip(session, PairingRequest).values(values).returning(PairingRequest.id)
            )
            if inserted is None:
                # The same person's first two messages raced, or (rarely) the code
                # was taken: read again and settle on one row.
                await session.rollback()
                return _AGAIN
            await session.commit()
            return pairing

    async def pending_pairings(
        self, *, now: datetime, after: tuple[datetime, str] | None = None, limit: int | None = None
    ) -> list[Pairing]:
        """Requests waiting, oldest first (who asked first is answered first); a page
        of `limit` starts `after` the (created_at, code) of the last one shown."""
        query = (
            select(PairingRequest)
            .where(pending(now))
            .order_by(PairingRequest.created_at, PairingRequest.code)
            .limit(limit)
        )
        if after is not None:
            at, code = after
            query = query.where(
                or_(
                    PairingRequest.created_at > at,
                    and_(PairingRequest.created_at == at, PairingRequest.code > code),
                )
            )
        async with self._sessions() as session:
            return [_pairing(row) for row in await session.scalars(query)]

    async def approve_pairing(self, code: str, *, now: datetime) -> tuple[Approval, Pairing | None]:
        async with self._sessions() as session:
            row = await session.scalar(
                select(PairingRequest).where(PairingRequest.code == normalise_code(code))
            )
            if row is None:
                return Approval.UNKNOWN, None
            if row.approved_at is not None:
                return Approval.ALREADY_APPROVED, _pairing(row)
            if row.expires_at <= now:
                return Approval.EXPIRED, _pairing(row)
            row.approved_at = now
            await session.commit()
            return Approval.APPROVED, _pairing(row)

    async def reject_pairing(self, code: str) -> Pairing | None:
        """Forget a request nobody approved; the person gets a new code if they write
        again (within the channel's cap). None if no such request waits."""
        async with self._sessions() as session:
            row = await session.scalar(
                select(PairingRequest).where(
                    PairingRequest.code == normalise_code(code),
                    PairingRequest.approved_at.is_(None),
                )
            )
            if row is None:
                return None
            await session.delete(row)
            await session.commit()
            return _pairing(row)
