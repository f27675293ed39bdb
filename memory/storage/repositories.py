"""Every repository over one database, made in one place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.attachments import Attachments
from memory.storage.conversations import Conversations
from memory.storage.deliveries import Deliveries
from memory.storage.directory import Directory
from memory.storage.engine import writer_queue
from memory.storage.erasure import Erasure
from memory.storage.idempotency import IdempotencyKeys
from memory.storage.identities import Identities
from memory.storage.leases import Leases
from memory.storage.linking import Links
from memory.storage.lookups import Lookups
from memory.storage.messages import Messages
from memory.storage.operator_sessions import OperatorSessions
from memory.storage.pairing import Pairings
from memory.storage.previews import Previews
from memory.storage.rights import Rights
from memory.storage.schedules import Schedules
from memory.storage.search import Search
from memory.storage.stats import Stats
from memory.storage.usage_days import UsageLedger
from memory.storage.watermarks import Watermarks
from memory.storage.work import Work


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
    idempotency: IdempotencyKeys
    search: Search
    directory: Directory
    work: Work
    erasure: Erasure
    rights: Rights
    lookups: Lookups
    operator_sessions: OperatorSessions
    stats: Stats
    schedules: Schedules
    previews: Previews
    usage: UsageLedger
    attachments: Attachments

    @classmethod
    def open(
        cls,
        sessions: async_sessionmaker[AsyncSession],
        *,
        count_tokens: Callable[[str], int],
        now: Callable[[], datetime],
        holder: str | None = None,
        archive_dir: Path | None = None,
    ) -> Repositories:
        """`count_tokens` is stored with each message; `now` is the clock leases read;
        `holder` names this process in leases (None: a name of its own);
        `archive_dir` holds the transcript files erasure removes (None: none are kept)."""
        # One queue for the writes a message's path makes (SQLite's single writer).
        writes = writer_queue(sessions)
        return cls(
            messages=Messages(sessions, count_tokens=count_tokens, writes=writes),
            conversations=Conversations(sessions),
            identities=Identities(sessions, writes=writes),
            pairings=Pairings(sessions),
            links=Links(sessions),
            deliveries=Deliveries(sessions, writes=writes),
            leases=Leases(sessions, now, holder=holder),
            watermarks=Watermarks(sessions),
            idempotency=IdempotencyKeys(sessions),
            search=Search(sessions),
            directory=Directory(sessions),
            work=Work(sessions),
            erasure=Erasure(sessions, archive_dir=archive_dir),
            rights=Rights(sessions),
            lookups=Lookups(sessions),
            operator_sessions=OperatorSessions(sessions),
            stats=Stats(sessions),
            schedules=Schedules(sessions, count_tokens=count_tokens),
            previews=Previews(sessions),
            usage=UsageLedger(sessions),
            attachments=Attachments(sessions),
        )
