"""Pooled Postgres connections: one the server dropped is replaced before use, and
none is pinged on every checkout (three round trips each with asyncpg)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.storage import engine as engines
from memory.storage.engine import create_engine
from tests.support.databases import POSTGRES_ADMIN_URL
from tests.support.polling import eventually

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


async def _pooled_backends(database: str) -> int:
    admin = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=5)
    try:
        count: int = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
        return count
    finally:
        await admin.close()


async def _all_closed(connections: list[asyncpg.Connection]) -> bool:
    return all(connection.is_closed() for connection in connections)


async def _terminate_all(database: str) -> None:
    admin = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=5)
    try:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
    finally:
        await admin.close()


async def _use(engine: AsyncEngine, connections: int) -> list[asyncpg.Connection]:
    """Check out `connections` pooled connections at once, so the pool holds that many;
    the driver's connections they were."""
    all_out = asyncio.Barrier(connections)
    used: list[asyncpg.Connection] = []

    async def one() -> None:
        async with engine.connect() as connection:
            assert await connection.scalar(text("SELECT 1")) == 1
            raw = await connection.get_raw_connection()
            used.append(raw.driver_connection)
            await all_out.wait()

    await asyncio.gather(*(one() for _ in range(connections)))
    return used


async def test_connections_the_server_closed_are_replaced_before_use(database_url: str) -> None:
    database = make_url(database_url).database
    assert database is not None
    engine = create_engine(database_url)
    try:
        pooled = await _use(engine, 3)
        await _terminate_all(database)  # as a restart or an operator's kill does
        await eventually(lambda: _pooled_backends(database), until=lambda n: n == 0)
        # The server's goodbye reaches each connection as the event loop reads it: until
        # then a checkout cannot know (a statement on it fails, and the next checkout
        # drops it). Once the driver has read it, no use sees an error.
        await eventually(lambda: _all_closed(pooled), until=bool)
        # Every pooled connection is dead; each use gets a live one instead of an error.
        await _use(engine, 3)
    finally:
        await engine.dispose()


async def test_a_long_unused_connection_is_pinged_and_a_recent_one_is_not(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = create_engine(database_url)
    pings = 0
    try:
        await _use(engine, 1)
        # SQLAlchemy leaves `ping` untyped.
        original: Callable[[AsyncAdapt_asyncpg_connection], None] = (
            AsyncAdapt_asyncpg_connection.ping
        )

        def counted(self: AsyncAdapt_asyncpg_connection) -> None:
            nonlocal pings
            pings += 1
            original(self)

        monkeypatch.setattr(AsyncAdapt_asyncpg_connection, "ping", counted)
        await _use(engine, 1)
        assert pings == 0  # just returned: used as it is
        monkeypatch.setattr(engines, "IDLE_PING_SECONDS", -1.0)
        await _use(engine, 1)
        assert pings == 1  # unused "for long": asked first
    finally:
        await engine.dispose()


async def test_without_the_check_a_dropped_connection_fails_its_next_use(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test above proves something: with the check switched off, the same drop is
    # an error on the next use.
    monkeypatch.setattr(engines, "_alive", lambda *_: None)
    database = make_url(database_url).database
    assert database is not None
    engine = create_engine(database_url)
    try:
        await _use(engine, 1)
        await _terminate_all(database)
        await eventually(lambda: _pooled_backends(database), until=lambda n: n == 0)
        with pytest.raises(DBAPIError):
            await _use(engine, 1)
    finally:
        await engine.dispose()
