"""The operator's side of pairing: see who is waiting, let one of them in.

Used by `parley pairing list|approve CODE`; the person writes again once approved.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from gateway.errors import InputError
from gateway.settings import Settings
from memory.storage.engine import create_engine, session_factory
from memory.storage.migrate import prepare as prepare_schema
from memory.storage.pairing import Approval, Pairing, Pairings


@asynccontextmanager
async def _pairings(settings: Settings) -> AsyncIterator[Pairings]:
    engine = create_engine(settings.resolved_database_url)
    try:
        await prepare_schema(engine, migrate_embedded=settings.is_sqlite)
        yield Pairings(session_factory(engine))
    finally:
        await engine.dispose()


def describe(pairing: Pairing, now: datetime) -> str:
    minutes = max(int((pairing.expires_at - now).total_seconds() // 60), 0)
    name = f" ({pairing.display_name})" if pairing.display_name else ""
    return (
        f"{pairing.code}  {pairing.channel} {pairing.external_id}{name}  expires in {minutes} min"
    )


async def pending_lines(settings: Settings) -> list[str]:
    now = datetime.now(UTC)
    async with _pairings(settings) as pairings:
        return [describe(p, now) for p in await pairings.pending_pairings(now=now)]


async def approve(settings: Settings, code: str) -> str:
    async with _pairings(settings) as pairings:
        outcome, pairing = await pairings.approve_pairing(code, now=datetime.now(UTC))
    if pairing is None or outcome is Approval.UNKNOWN:
        raise InputError(f"no pairing request has the code {code!r}")
    if outcome is Approval.EXPIRED:
        raise InputError(
            f"the code {pairing.code} has expired; the person gets a new one when they write again"
        )
    who = f"{pairing.channel} {pairing.external_id}"
    if outcome is Approval.ALREADY_APPROVED:
        return f"{who} was already approved"
    return f"approved {who}: they can talk to the assistant now"
