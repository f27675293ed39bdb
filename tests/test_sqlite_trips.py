"""SQLite's statements take one trip to aiosqlite's thread each, a session that only read
ends without one, a short read takes none and neither does a short write transaction's
statement once its first write holds the lock, while everything a DBAPI cursor reports
stays right."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, async_sessionmaker

from memory.storage.engine import (
    create_engine,
    read,
    session_factory,
    write_alone,
    write_transaction,
)
from memory.storage.sqlite_trips import reads_inline


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
    return _counting_on((await conn.get_raw_connection()).driver_connection)


def _counting_on(driver: Any) -> Callable[[], int]:
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


async def _on_each_connection(engine: AsyncEngine, name: str, function: Callable[[], Any]) -> None:
    """A SQL function `name()` on every connection the engine opens from now on (those
    it holds are closed)."""

    def add(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.driver_connection._conn.create_function(name, 0, function)

    event.listen(engine.sync_engine, "connect", add)
    await engine.dispose()


async def test_a_short_read_runs_on_the_event_loops_thread(engine: AsyncEngine) -> None:
    await _on_each_connection(engine, "thread_id", threading.get_ident)
    here = threading.get_ident()

    def reads_then_writes(conn: Connection) -> None:
        trips = _counting_on(conn.connection.driver_connection)
        assert conn.scalar(text("SELECT thread_id()")) == here
        assert conn.execute(text("SELECT count(*) FROM notes")).scalar() == 0
        assert trips() == 0
        # A write may wait for the lock: the thread; and so, inside its
        # transaction, does a read.
        conn.execute(text("INSERT INTO notes (body) VALUES ('x')"))
        assert trips() == 1
        assert conn.scalar(text("SELECT thread_id()")) != here
        assert trips() == 2

    await read(session_factory(engine), reads_then_writes)
    async with engine.connect() as conn:  # not lent for short reads: the thread
        trips = await _counting(conn)
        assert await conn.scalar(text("SELECT thread_id()")) != here
        assert trips() == 1


async def test_no_read_runs_beside_a_statement_given_up_on_in_the_thread(
    engine: AsyncEngine,
) -> None:
    """A statement given up on (a timeout) goes on running in its connection's thread.
    SQLAlchemy invalidates that connection, and closing it waits for the statement: an
    inline read never shares a connection with a statement still running."""
    gate = threading.Event()
    await _on_each_connection(engine, "gate", lambda: gate.wait(10))
    await _on_each_connection(engine, "thread_id", threading.get_ident)
    here = threading.get_ident()
    async with engine.connect() as conn:
        busy = (await conn.get_raw_connection()).dbapi_connection
        asyncio.get_running_loop().call_later(0.3, gate.set)  # the statement's length
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await conn.execute(text("SELECT gate()"))
        assert gate.is_set()  # given up on at 50 ms, but only once the statement ended
        assert conn.invalidated
        await conn.rollback()
        assert (await conn.get_raw_connection()).dbapi_connection is not busy
        with reads_inline(conn):
            assert await conn.scalar(text("SELECT thread_id()")) == here


async def test_a_short_write_transaction_goes_on_inline_once_it_holds_the_lock(
    engine: AsyncEngine,
) -> None:
    await _on_each_connection(engine, "thread_id", threading.get_ident)
    here = threading.get_ident()
    sessions = session_factory(engine)

    def transactions(conn: Connection) -> None:
        trips = _counting_on(conn.connection.driver_connection)
        # Before any write the lock is not ours: a read keeps its trip.
        assert conn.scalar(text("SELECT thread_id()")) != here
        conn.execute(text("INSERT INTO notes (body) VALUES ('first')"))  # the lock
        assert trips() == 2
        conn.execute(text("INSERT INTO notes (body) VALUES ('second')"))
        conn.execute(text("UPDATE notes SET body = body || '!'"))
        assert conn.scalar(text("SELECT count(*) FROM notes WHERE body LIKE '%!'")) == 2
        assert conn.scalar(text("SELECT thread_id()")) == here
        assert trips() == 2
        conn.commit()  # may checkpoint: the thread
        assert trips() == 3
        # The next transaction starts over: its first write waits for the lock there.
        conn.execute(text("INSERT INTO notes (body) VALUES ('undone')"))
        assert trips() == 4
        conn.execute(text("UPDATE notes SET body = body || '?'"))
        assert trips() == 4
        conn.rollback()
        assert trips() == 5

    await write_transaction(sessions, transactions)
    bodies = await read(sessions, lambda c: c.scalars(text("SELECT body FROM notes ORDER BY id")))
    assert bodies.all() == ["first!", "second!"]


async def test_after_a_failed_write_nothing_runs_inline(engine: AsyncEngine) -> None:
    """A write that failed may or may not hold the lock: until the transaction ends,
    every statement goes to the thread, where waiting for the lock harms no one."""
    await _on_each_connection(engine, "thread_id", threading.get_ident)
    here = threading.get_ident()
    sessions = session_factory(engine)
    async with sessions() as session:
        await session.execute(text("INSERT INTO notes (body) VALUES ('taken')"))
        await session.commit()

    def failed(conn: Connection) -> None:
        with pytest.raises(IntegrityError):
            conn.execute(text("INSERT INTO notes (body) VALUES ('taken')"))
        assert conn.scalar(text("SELECT thread_id()")) != here
        conn.rollback()

    await write_transaction(sessions, failed)
    # Outside a short write transaction, a write's transaction keeps the thread.
    async with sessions() as session:
        await session.execute(text("INSERT INTO notes (body) VALUES ('more')"))
        assert await session.scalar(text("SELECT thread_id()")) != here
        await session.commit()


async def test_another_writer_waits_for_an_inline_transaction_to_commit(
    engine: AsyncEngine,
) -> None:
    """The inline statements are the transaction's own: another connection's write
    waits for its commit and sees all of it."""
    sessions = session_factory(engine)

    def alongside_another(conn: Connection) -> str:
        conn.execute(text("INSERT INTO notes (body) VALUES ('a')"))
        conn.execute(text("INSERT INTO notes (body) VALUES ('b')"))
        with conn.engine.connect() as other:
            other.execute(text("PRAGMA busy_timeout = 0"))
            with pytest.raises(OperationalError, match="locked"):
                other.execute(text("INSERT INTO notes (body) VALUES ('c')"))
            other.rollback()
            conn.commit()
            other.execute(text("INSERT INTO notes (body) VALUES ('c')"))
            other.commit()
            return str(other.scalar(text("SELECT group_concat(body) FROM notes")))

    assert await write_transaction(sessions, alongside_another) == "a,b,c"


async def test_every_connection_lent_goes_back_to_the_pool(engine: AsyncEngine) -> None:
    """Whether the block succeeded or failed, the pool has its connection back, and what
    was not committed is not kept."""
    sessions = session_factory(engine)
    assert await read(sessions, lambda c: c.scalar(text("SELECT count(*) FROM notes"))) == 0
    await write_alone(
        sessions, lambda c: c.execute(text("INSERT INTO notes (body) VALUES ('kept')"))
    )
    with pytest.raises(IntegrityError):
        await write_alone(
            sessions, lambda c: c.execute(text("INSERT INTO notes (body) VALUES ('kept')"))
        )
    with pytest.raises(OperationalError):
        await read(sessions, lambda c: c.execute(text("SELECT nothing FROM nowhere")))

    def half_done(conn: Connection) -> None:
        conn.execute(text("INSERT INTO notes (body) VALUES ('rolled back')"))
        conn.execute(text("INSERT INTO notes (body) VALUES ('kept')"))

    with pytest.raises(IntegrityError):
        await write_transaction(sessions, half_done)

    pool: Any = engine.pool
    assert pool.checkedout() == 0
    bodies = await read(sessions, lambda c: c.scalars(text("SELECT body FROM notes")).all())
    assert bodies == ["kept"]


async def test_a_connection_beyond_the_pools_size_is_closed_and_counted_out(
    engine: AsyncEngine,
) -> None:
    """Beyond its size, the pool closes a connection it has no room for, which waits for
    the connection's thread: a read's block waits for it too, and nothing is left open."""
    sessions = session_factory(engine)
    pool: Any = engine.pool
    held = [await engine.connect() for _ in range(pool.size())]
    try:
        for conn in held:
            await conn.scalar(text("SELECT 1"))  # checked out for real

        def beyond(conn: Connection) -> Any:
            assert pool.overflow() == 1
            return conn.scalar(text("SELECT count(*) FROM notes"))

        assert await read(sessions, beyond) == 0
    finally:
        for conn in held:
            await conn.close()
    assert (pool.checkedout(), pool.overflow(), pool.checkedin()) == (0, 0, pool.size())


async def test_a_block_of_reads_or_a_short_transaction_is_one_greenlet_with_the_same_trips(
    engine: AsyncEngine,
) -> None:
    """`read`, `write_alone` and `write_transaction` run a block of statements without
    an `await` each: the reads on the event loop's thread, the first write and the
    commit in the connection's, what follows the first write inline."""
    await _on_each_connection(engine, "thread_id", threading.get_ident)
    here = threading.get_ident()
    sessions = session_factory(engine)
    threads = []

    def both_ways(conn: Connection) -> int:
        threads.append(conn.scalar(text("SELECT thread_id()")))
        conn.execute(text("INSERT INTO notes (body) VALUES ('first')"))
        threads.append(conn.scalar(text("SELECT thread_id()")))
        return int(conn.scalar(text("SELECT count(*) FROM notes")) or 0)

    assert await write_transaction(sessions, both_ways) == 1
    # Before the first write, a read waits for the thread; after it, nothing does.
    assert threads[0] != here
    assert threads[1] == here
    assert await read(sessions, lambda c: c.scalar(text("SELECT thread_id()"))) == here
    assert (
        await write_alone(
            sessions, lambda c: c.execute(text("UPDATE notes SET body = 'only'")).rowcount
        )
        == 1
    )
    rows = await read(sessions, lambda c: c.execute(text("SELECT body FROM notes")).all())
    assert [row.body for row in rows] == ["only"]


async def test_a_write_given_up_on_mid_trip_leaves_nothing_and_no_connection_out(
    engine: AsyncEngine,
) -> None:
    """A block cancelled while its statement runs in the connection's thread (a
    timeout): the connection is invalidated and closed inside the block's greenlet
    once the statement ends, nothing of the block is committed, and the pool lends a
    working connection next."""
    gate = threading.Event()
    await _on_each_connection(engine, "slow_body", lambda: "late" if gate.wait(10) else "")
    sessions = session_factory(engine)
    asyncio.get_running_loop().call_later(0.3, gate.set)  # the statement's length
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await write_alone(
                sessions, lambda c: c.execute(text("INSERT INTO notes (body) VALUES (slow_body())"))
            )
    assert gate.is_set()  # given up on at 50 ms, but only once the statement ended
    pool: Any = engine.pool
    assert pool.checkedout() == 0
    assert await read(sessions, lambda c: c.scalar(text("SELECT count(*) FROM notes"))) == 0
