"""Leases: which process does a named piece of work, decided by the database.

A queue can lose or orphan a job (a worker killed mid-job leaves arq's keys behind);
the lease is what says whether someone is really on it. A holder renews its lease
while it works; one that dies lets it lapse within `ttl`, and the next try takes over.

Here are the rows only: claim, renew and release, each one statement, atomic by itself,
that says whether the lease is ours (on a server database, one round trip each).
Renewing on time, and telling the holder when the lease is lost, is the gateway's lease
keeper (`gateway.replicas.lease_keeper`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import CTE, bindparam, delete, or_, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.engine import write_alone
from memory.storage.inserts import dialect_insert
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


@functools.cache
def _take(dialect: str) -> Any:
    """Insert the lease, or take it over if it has expired or is ours already: one
    statement, so two claimers never both get it. A row back: it is ours."""
    new = dialect_insert(dialect, LEASES).values(
        name=bindparam("lease"),
        holder=bindparam("me"),
        expires_at=bindparam("until"),
        state=bindparam("said"),
    )
    return new.on_conflict_do_update(
        index_elements=[_L.name],
        set_={
            "holder": new.excluded.holder,
            "expires_at": new.excluded.expires_at,
            "state": new.excluded.state,
        },
        where=or_(_L.expires_at < bindparam("now"), _L.holder == bindparam("me")),
    ).returning(_L.name)


_RELEASE = delete(LEASES).where(_L.name == bindparam("lease"), _L.holder == bindparam("me"))


class LeaseLost(Exception):
    """A write that needed a lease found it expired or taken by another holder."""


@dataclass(frozen=True, slots=True)
class Held:
    """A lease a write must still hold, checked in the write's own transaction."""

    name: str
    holder: str


def lock_params(held: Held, now: datetime) -> dict[str, object]:
    """The bound values of `held_fence`."""
    return {"lease": held.name, "me": held.holder, "now": now}


def held_fence() -> CTE:
    """`lock_held` as a CTE of a larger statement (`lock_params`): a row if the lease
    is still ours, locked until that statement's transaction ends; none otherwise."""
    return _LOCK.returning(_L.name).cte("fence")


def lock_held(connection: Connection, held: Held, now: datetime) -> None:
    """Raise `LeaseLost` unless `held` is still ours; if it is, lock it until commit, so
    nobody can take it over (once expired) before this transaction is done."""
    locked = connection.execute(_LOCK, lock_params(held, now))
    if locked.rowcount != 1:
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
        params = {"lease": name, "me": self.holder, "now": now, "until": now + ttl, "said": state}
        return await write_alone(
            self._sessions,
            lambda c: c.execute(_take(c.dialect.name), params).first() is not None,
        )

    async def renew(self, name: str, ttl: timedelta, *, state: str | None = None) -> bool:
        """Extend `name` by `ttl` if it is still ours and has not expired; False: lost
        (lapsed, or taken by another holder), and a holder must stop."""
        now = self._now()
        state = None if state is None else state[:STATE_CHARS]
        params = {"lease": name, "me": self.holder, "now": now, "until": now + ttl, "said": state}
        return await write_alone(self._sessions, lambda c: bool(c.execute(_RENEW, params).rowcount))

    def now(self) -> datetime:
        """The time leases are written with: a holder counts its lease's expiry by it."""
        return self._now()

    def held(self, name: str) -> Held:
        return Held(name, self.holder)

    async def release(self, name: str) -> None:
        params = {"lease": name, "me": self.holder}
        await write_alone(self._sessions, lambda c: c.execute(_RELEASE, params))
