"""SQLite's statements take one trip to aiosqlite's thread each, and a session that only
read ends without one, while everything a DBAPI cursor reports stays right."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, async_sessionmaker

from memory.storage.engine import create_engine


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'trips.db'}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT UNIQUE)"))
    yield engine
    await engine.dispose()


async def _counting(conn: AsyncConnection) -> Callable[[], int]:
    """Counts the calls the connection makes to aiosqlite's thread from now on (the
    library's own method, wrapped on this one connection: it still does the work)."""
    driver: Any = (await conn.get_raw_connection()).driver_connection
    real = driver._execute
    trips = 0

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal trips
        trips += 1
        return await real(fn, *args, **kwargs)

    driver._execute = counted
    return lambda: trips


async def test_a_statement_is_one_trip_and_a_read_ends_without_one(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        trips = await _counting(conn)
        rows = (await conn.execute(text("SELECT 1 AS one, 'a' AS two"))).all()
        assert rows == [(1, "a")]
        assert trips() == 1
        await conn.rollback()  # nothing was begun: nothing to end
        assert trips() == 1
        await conn.execute(text("INSERT INTO notes (body) VALUES ('x')"))
        assert trips() == 2
        await conn.commit()  # a write began a transaction: its commit is a trip
        assert trips() == 3


async def test_the_cursor_reports_what_sqlite_did(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        inserted = await conn.execute(text("INSERT INTO notes (body) VALUES ('first')"))
        assert inserted.lastrowid == 1
        await conn.execute(
            text("INSERT INTO notes (body) VALUES (:body)"),
            [{"body": "second"}, {"body": "third"}],
        )
        changed = await conn.execute(text("UPDATE notes SET body = body || '!' WHERE id > 1"))
        assert changed.rowcount == 2
        returned = await conn.execute(
            text("UPDATE notes SET body = upper(body) WHERE id < 3 RETURNING id, body")
        )
        assert sorted(returned.all()) == [(1, "FIRST"), (2, "SECOND!")]
        assert returned.rowcount == 2
    async with engine.connect() as conn:
        streamed = await conn.stream(text("SELECT body FROM notes ORDER BY id"))
        assert [row.body async for row in streamed] == ["FIRST", "SECOND!", "third!"]


async def test_a_failed_first_write_is_rolled_back_all_the_same(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        await conn.execute(text("INSERT INTO notes (body) VALUES ('taken')"))
        await conn.commit()
        with pytest.raises(IntegrityError):
            await conn.execute(text("INSERT INTO notes (body) VALUES ('taken')"))
        driver: Any = (await conn.get_raw_connection()).driver_connection
        assert await driver._execute(lambda: driver._conn.in_transaction)
        await conn.rollback()
        # Ended, so the write lock the failed INSERT took is free for others.
        assert not await driver._execute(lambda: driver._conn.in_transaction)


async def test_rollback_undoes_a_write_and_errors_keep_their_types(engine: AsyncEngine) -> None:
    sessions = async_sessionmaker(engine)
    async with sessions() as session:
        await session.execute(text("INSERT INTO notes (body) VALUES ('kept')"))
        await session.commit()
        await session.execute(text("INSERT INTO notes (body) VALUES ('undone')"))
        await session.rollback()
        with pytest.raises(IntegrityError):
            await session.execute(text("INSERT INTO notes (body) VALUES ('kept')"))
        await session.rollback()
        with pytest.raises(OperationalError, match="no such table"):
            await session.execute(text("SELECT * FROM missing"))
        await session.rollback()
        bodies = (await session.execute(text("SELECT body FROM notes"))).scalars().all()
    assert bodies == ["kept"]
