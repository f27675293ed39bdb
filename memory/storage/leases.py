"""Leases: which process does a named piece of work, decided by the database.

A queue can lose or orphan a job (a worker killed mid-job leaves arq's keys behind);
the lease is what says whether someone is really on it. A holder renews its lease
while it works; one that dies lets it lapse within `ttl`, and the next try takes over.

Here are the rows only: claim, renew and release, each one transaction that says
whether the lease is ours. Renewing on time, and telling the holder when the lease is
lost, is the gateway's lease keeper (`gateway.replicas.lease_keeper`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, or_, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.inserts import skipping_insert
from memory.storage.tables import LEASES

STATE_CHARS = 200  # Lease.state's width


# A turn claims and releases its conversation's lease, and its writes lock it: built
# once (`memory.storage.tables`).
_L = LEASES.c
# Ours (`me`), and not expired at `now`.
_STILL_OURS = update(LEASES).where(
    _L.name == bindparam("lease"), _L.holder == bindparam("me"), _L.expires_at > bindparam("now")
)
_LOCK = _STILL_OURS.values(expires_at=_L.expires_at)
_RENEW = _STILL_OURS.values(expires_at=bindparam("until"), state=bindparam("said"))
_TAKE = (
    update(LEASES)
    .where(
        _L.name == bindparam("lease"),
        or_(_L.expires_at < bindparam("now"), _L.holder == bindparam("me")),
    )
    .values(holder=bindparam("me"), expires_at=bindparam("until"), state=bindparam("said"))
)
_RELEASE = delete(LEASES).where(_L.name == bindparam("lease"), _L.holder == bindparam("me"))


class LeaseLost(Exception):
    """A write that needed a lease found it expired or taken by another holder."""


@dataclass(frozen=True, slots=True)
class Held:
    """A lease a write must still hold, checked in the write's own transaction."""

    name: str
    holder: str


async def lock_held(session: AsyncSession, held: Held, now: datetime) -> None:
    """Raise `LeaseLost` unless `held` is still ours; if it is, lock it until commit, so
    nobody can take it over (once expired) before this transaction is done."""
    locked = await session.execute(_LOCK, {"lease": held.name, "me": held.holder, "now": now})
    if locked.rowcount != 1:  # type: ignore[attr-defined]
        raise LeaseLost(held.name)


class Leases:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        now: Callable[[], datetime],
        *,
        holder: str | None = None,
    ) -> None:
        self._sessions = sessions
        self._now = now
        # One holder per process: a process never competes with itself.
        self.holder = holder or uuid.uuid4().hex

    async def claim(self, name: str, ttl: timedelta, *, state: str | None = None) -> bool:
        """Take `name` unless a live holder other than us has it; `state`: what we say
        of the work, kept with the lease (cut to fit)."""
        now = self._now()
        state = None if state is None else state[:STATE_CHARS]
        async with self._sessions() as session:
            taken = await session.execute(
                _TAKE,
                {"lease": name, "me": self.holder, "now": now, "until": now + ttl, "said": state},
            )
            if taken.rowcount == 0:  # type: ignore[attr-defined]
                taken = await session.execute(
                    skipping_insert(session.get_bind().dialect.name, LEASES),
                    {"name": name, "holder": self.holder, "expires_at": now + ttl, "state": state},
                )
            await session.commit()
        return bool(taken.rowcount)  # type: ignore[attr-defined]

    async def renew(self, name: str, ttl: timedelta, *, state: str | None = None) -> bool:
        """Extend `name` by `ttl` if it is still ours and has not expired; False: lost
        (lapsed, or taken by another holder), and a holder must stop."""
        now = self._now()
        state = None if state is None else state[:STATE_CHARS]
        async with self._sessions() as session:
            renewed = await session.execute(
                _RENEW,
                {"lease": name, "me": self.holder, "now": now, "until": now + ttl, "said": state},
            )
            await session.commit()
        return bool(renewed.rowcount)  # type: ignore[attr-defined]

    def now(self) -> datetime:
        """The time leases are written with: a holder counts its lease's expiry by it."""
        return self._now()

    def held(self, name: str) -> Held:
        return Held(name, self.holder)

    async def release(self, name: str) -> None:
        async with self._sessions() as session:
            await session.execute(_RELEASE, {"lease": name, "me": self.holder})
            await session.commit()
