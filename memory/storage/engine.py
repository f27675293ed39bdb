"""Database engine and sessions (SQLite in WAL mode, or Postgres via asyncpg)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection
from sqlalchemy.util.concurrency import greenlet_spawn

from memory.storage.files import create_private_file, private_dir, tighten
from memory.storage.sqlite_trips import (
    one_trip_dbapi,
    reads_inline,
    writes_inline,
)

T = TypeVar("T")

# SQLite's companions of the database file: it creates them with the database's mode.
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")

# A pooled server connection unused for longer than this is pinged before it is handed
# out: a proxy or firewall may have dropped it without a word.
IDLE_PING_SECONDS = 30.0


def create_engine(url: str) -> AsyncEngine:
    """Create the async engine; SQLite gets WAL, a busy timeout and foreign keys."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        server = create_async_engine(url, pool_size=10, max_overflow=10)
        event.listen(server.sync_engine, "checkin", _returned)
        event.listen(server.sync_engine, "checkout", _alive)
        return server
    # A `file:` URI (uri=true) names its file and mode itself: it is not a path to create.
    if parsed.database and parsed.database != ":memory:" and not parsed.query.get("uri"):
        _private_database(Path(parsed.database))
    # Every aiosqlite connection is a thread with its pragmas: keep enough of them open
    # that a burst does not open and close connections per request. A session ends its
    # transaction itself (commit, or rollback on close): the pool's second rollback on
    # return was one more trip to the connection's thread, two of an acknowledgement's 16.
    engine = create_async_engine(
        url,
        pool_size=20,
        max_overflow=10,
        pool_reset_on_return=None,
        module=one_trip_dbapi(),
        # Short reads run on the event loop's thread (`read`), the rest in the
        # connection's own: one at a time, never both at once.
        connect_args={"check_same_thread": False},
    )
    event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def _returned(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
    record.info["returned_at"] = time.monotonic()


def _alive(dbapi_connection: Any, record: ConnectionPoolEntry, _: PoolProxiedConnection) -> None:
    """Instead of a ping on every checkout (three round trips with asyncpg: twenty a
    turn): a connection the server closed (a restart, a terminated backend) is known
    to the driver without asking, and only one long unused is pinged. Raising
    `DisconnectionError` makes the pool drop it and hand out a fresh one."""
    if dbapi_connection.driver_connection.is_closed():
        raise DisconnectionError("the database closed this connection")
    returned = record.info.get("returned_at")
    if returned is not None and time.monotonic() - returned > IDLE_PING_SECONDS:
        try:
            dbapi_connection.ping()
        except Exception as exc:
            raise DisconnectionError("a long unused connection no longer answers") from exc


def _private_database(path: Path) -> None:
    """Create the database file 0600 before SQLite opens it, so it is never readable by
    others and neither are the -wal and -shm files SQLite gives the same mode."""
    private_dir(path.parent)
    create_private_file(path)
    # Files left by a version that did not make them private.
    for suffix in _SQLITE_SIDE_FILES:
        tighten(path.with_name(path.name + suffix))


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # synchronous=NORMAL in WAL mode survives an application crash; an OS crash or power
    # loss can lose the last few commits (documented in the README).
    # secure_delete: freed space is zeroed, so an erased person's text leaves the file
    # (memory.storage.erasure). On every connection, not only the erasing one: a row
    # rewritten by an update (a chunk getting its summary) frees the old copy, and that
    # copy must not linger in a free page either. It costs a write of each page freed,
    # which happens rarely here (rows are mostly appended and updated in place).
    cursor = dbapi_connection.cursor()
    for pragma in (
        "journal_mode=WAL",
        "synchronous=NORMAL",
        "busy_timeout=10000",
        "foreign_keys=ON",
        "secure_delete=ON",
    ):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


async def read(sessions: async_sessionmaker[AsyncSession], block: Callable[[Connection], T]) -> T:
    """What `block` reads (short reads: indexed lookups, a bounded page), on a Core
    connection: the reads on the hot paths are Core statements, and an ORM session's
    bookkeeping cost about as much as one of them.

    On a server database its statements commit each by itself: no BEGIN before the first
    and no ROLLBACK after the last, two of the round trips of every read. What it sees is
    the same: at READ COMMITTED (the default, and what the gateway runs at) every
    statement takes its own snapshot anyway. On SQLite, which begins no transaction for a
    read, they run on the event loop's thread, without a trip to the connection's
    (`sqlite_trips`).

    Lending the connection, the reads and giving it back are one greenlet, where an
    `AsyncConnection` starts one for each call: a new greenlet maps a fresh 16 KiB chunk
    for its Python frames and unmaps it as it ends, about 10 µs on CPython 3.11, and a
    short read made three (bench/README.md, stop 46)."""
    return await greenlet_spawn(_read_here, _engine(sessions).sync_engine, block)


def _read_here(engine: Engine, block: Callable[[Connection], T]) -> T:
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            with reads_inline(connection):
                return block(connection)
        connection.execution_options(isolation_level="AUTOCOMMIT")
        return block(connection)


async def write_alone(
    sessions: async_sessionmaker[AsyncSession], block: Callable[[Connection], T]
) -> T:
    """What `block` answers of a write that is one statement, atomic by itself (an
    upsert, a guarded UPDATE or DELETE), in one greenlet as `read` does: on a server
    database it commits by itself, one round trip where a transaction around it makes
    three (BEGIN, the statement, COMMIT). On SQLite, where a write always begins a
    transaction, it is committed after `block`."""
    return await greenlet_spawn(_write_alone_here, _engine(sessions).sync_engine, block)


def _write_alone_here(engine: Engine, block: Callable[[Connection], T]) -> T:
    with engine.connect() as connection:
        if engine.dialect.name != "sqlite":
            connection.execution_options(isolation_level="AUTOCOMMIT")
            return block(connection)
        done = block(connection)
        connection.commit()
        return done


async def write_transaction(
    sessions: async_sessionmaker[AsyncSession], block: Callable[[Connection], T]
) -> T:
    """What `block` answers of a transaction of a few indexed single-row statements (a
    message stored, a part marked sent), committed after `block` and rolled back if it
    raises; in one greenlet, as `read` does, on a Core connection: an ORM session's
    opening, commit and close took a sixth of a Telegram turn's writes (bench/README.md,
    stop 45). On SQLite its statements after the first write run on the event loop's
    thread: the lock they could wait for is theirs by then (`sqlite_trips`); the first
    write and the commit keep their trips."""
    return await greenlet_spawn(_transaction_here, _engine(sessions).sync_engine, block)


def _transaction_here(engine: Engine, block: Callable[[Connection], T]) -> T:
    with engine.connect() as connection, writes_inline(connection):
        done = block(connection)
        connection.commit()
        return done


def dialect_of(sessions: async_sessionmaker[AsyncSession]) -> str:
    """The name of the database's dialect (`sqlite`, `postgresql`)."""
    return _engine(sessions).dialect.name


def _engine(sessions: async_sessionmaker[AsyncSession]) -> AsyncEngine:
    engine = sessions.kw.get("bind")
    if not isinstance(engine, AsyncEngine):
        raise TypeError("needs sessions bound to one engine (session_factory)")
    return engine


def writer_queue(sessions: async_sessionmaker[AsyncSession]) -> AbstractAsyncContextManager[Any]:
    """What a busy write path holds around its transaction. SQLite lets one writer in at
    a time and makes the others poll for the lock with naps of up to 100 ms, which at
    eight concurrent turns put p99 near a second; queued on a lock in this process, the
    next writer goes the moment the last one commits. A server database queues writers
    itself: nothing to hold."""
    bind = sessions.kw.get("bind")
    if bind is not None and bind.dialect.name == "sqlite":
        return asyncio.Lock()
    return contextlib.nullcontext()
