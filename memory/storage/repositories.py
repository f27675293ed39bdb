"""Every repository over one database, made in one place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.conversations import Conversations
from memory.storage.deliveries import Deliveries
from memory.storage.identities import Identities
from memory.storage.leases import Leases
from memory.storage.linking import Links
from memory.storage.messages import Messages
from memory.storage.pairing import Pairings
from memory.storage.watermarks import Watermarks


@dataclass(frozen=True, slots=True)
class Repositories:
    messages: Messages
    conversations: Conversations
    identities: Identities
    pairings: Pairings
    links: Links
    deliveries: Deliveries
    leases: Leases
    watermarks: Watermarks

    @classmethod
    def open(
        cls,
        sessions: async_sessionmaker[AsyncSession],
        *,
        count_tokens: Callable[[str], int],
        now: Callable[[], datetime],
        holder: str | None = None,
    ) -> Repositories:
        """`count_tokens` is stored with each message; `now` is the clock leases read;
        `holder` names this process in leases (None: a name of its own)."""
        return cls(
            messages=Messages(sessions, count_tokens=count_tokens),
            conversations=Conversations(sessions),
            identities=Identities(sessions),
            pairings=Pairings(sessions),
            links=Links(sessions),
            deliveries=Deliveries(sessions),
            leases=Leases(sessions, now, holder=holder),
            watermarks=Watermarks(sessions),
        )
