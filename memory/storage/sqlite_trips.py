"""SQLite through aiosqlite in one trip per statement, and short reads in none.

aiosqlite runs each call of the sqlite3 API in its own thread: SQLAlchemy's adapter
makes four of those trips for every statement (open a cursor, execute, fetch the rows,
close the cursor), and each trip costs a queue put, a thread wake-up and an event loop
wake-up, about 36 µs of CPU here against 8 µs for the statement itself. The cursor
below does all four in one trip. It is passed to the engine as its DBAPI module
(`create_async_engine(module=...)`); everything else is SQLAlchemy's aiosqlite dialect.
Server-side cursors (`stream()`) keep the library's own cursor.

A connection lent for short reads (`reads_inline`: the hot paths' indexed lookups,
`memory.storage.engine.read`) runs its SELECTs on the event loop's own thread: a
read outside a transaction waits for no lock a writer holds (WAL), so it takes as long
as the statement, where the trip would cost four times that. A web chat turn makes
five such reads: this took its trips from 12 to 7 and its CPU down by 7-8%
(bench/README.md). Writes, commits and anything inside a transaction keep the thread:
they may wait for the write lock, and the event loop must not.

Once a transaction's first write is done, though, the lock is its own until the
commit, and what follows waits for nobody: in a short write transaction (`writes_inline`:
a message stored, a part marked sent) those statements run inline too. The first write
and the commit, which may run a WAL checkpoint, keep their trips. A web chat turn's
trips went from 7 to 4 and a Telegram turn's from 14 to 9 (bench/README.md).
"""

from __future__ import annotations

import collections
import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, cast

import aiosqlite
from sqlalchemy.connectors.asyncio import AsyncIODBAPIConnection
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.util import EMPTY_DICT
from sqlalchemy.util.concurrency import await_

# The statements that take the write lock (others, such as a CTE that writes, are
# taken for reads: they keep the trip).
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")

# What one trip brings back: description, rowcount, lastrowid, every row, and whether
# the connection is inside a transaction after it.
_Outcome = tuple[Any, int, int | None, list[Any], bool]


def _one_trip(
    connection: sqlite3.Connection, operation: str, parameters: Any, many: bool
) -> _Outcome:
    """In aiosqlite's thread: run the statement and read all it returns."""
    cursor = connection.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        rows = cursor.fetchall() if cursor.description else []
        # After the fetch: with RETURNING, SQLite counts rows as they are stepped.
        return (
            cursor.description,
            cursor.rowcount,
            cursor.lastrowid,
            rows,
            connection.in_transaction,
        )
    finally:
        cursor.close()


class OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    """A buffered cursor: the statement's outcome is fetched whole in one trip."""

    __slots__ = ("_outcome",)

    def __init__(self, adapt_connection: AsyncAdapt_aiosqlite_connection) -> None:
        # No cursor is opened ahead: the trip opens and closes its own.
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = None  # type: ignore[assignment]  # every method that used it is ours
        self._soft_closed_memoized = EMPTY_DICT
        self._rows = collections.deque()
        self._outcome: _Outcome = (None, -1, None, [], False)

    @property
    def description(self) -> Any:
        return self._outcome[0]

    @property
    def rowcount(self) -> int:
        return self._outcome[1]

    @property
    def lastrowid(self) -> Any:
        return self._outcome[2]

    @property
    def arraysize(self) -> int:
        return 1

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        """Rows are fetched whole: there is no batch size to set."""

    async def _async_soft_close(self) -> None:
        """Nothing is left open after a trip."""

    def close(self) -> None:
        self._rows.clear()

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        try:
            await_(self._trip(operation, parameters, many=False))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Sequence[Any]) -> Any:
        try:
            await_(self._trip(operation, seq_of_parameters, many=True))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    async def _trip(self, operation: Any, parameters: Any, *, many: bool) -> None:
        connection: Any = self._connection  # aiosqlite's, whose `_execute` is untyped
        adapted = cast(OneTripConnection, self._adapt_connection)
        async with adapted._execute_mutex:
            try:
                if adapted.runs_inline(operation):
                    self._outcome = _one_trip(connection._conn, operation, parameters, many)
                else:
                    self._outcome = await connection._execute(
                        _one_trip, connection._conn, operation, parameters, many
                    )
            except BaseException:
                # A failed write may have begun a transaction (and taken the write
                # lock, or not): unknown, so the next commit or rollback goes to the
                # thread, and so does every statement until then.
                # (A trip given up on while its statement runs there: SQLAlchemy
                # invalidates the connection and closing it waits for the statement,
                # so no inline statement ever runs beside one.)
                adapted.in_transaction = True
                adapted.holds_write_lock = False
                raise
        # A write done holds the database's write lock until the transaction ends.
        adapted.in_transaction = self._outcome[4]
        adapted.holds_write_lock = adapted.in_transaction and (
            adapted.holds_write_lock or operation.startswith(_WRITES)
        )
        self._rows = collections.deque(self._outcome[3])


class OneTripConnection(AsyncAdapt_aiosqlite_connection):
    """Also skips the trip of a commit or rollback with no transaction open: Python's
    sqlite3 begins one only before a write, so a session that only read (most of them)
    ends with nothing to end."""

    __slots__ = ("holds_write_lock", "in_transaction", "reads_inline", "writes_inline")
    _cursor_cls: type[AsyncAdapt_aiosqlite_cursor] = OneTripCursor

    def __init__(self, dbapi: Any, connection: AsyncIODBAPIConnection) -> None:
        super().__init__(dbapi, connection)
        self.in_transaction = False
        self.holds_write_lock = False
        self.reads_inline = False
        self.writes_inline = False

    def runs_inline(self, operation: str) -> bool:
        """Whether `operation` runs on the calling thread: a short read outside a
        transaction, or any statement of a short write transaction once its first
        write holds the lock (what is left can wait for no other connection)."""
        if self.writes_inline and self.holds_write_lock:
            return True
        return self.reads_inline and not self.in_transaction and operation.startswith("SELECT")

    def cursor(self, server_side: bool = False) -> Any:
        if server_side:
            # The library's own cursor, which reports nothing back: assume it began one.
            self.in_transaction = True
        return super().cursor(server_side)

    def rollback(self) -> None:
        if self.in_transaction:
            super().rollback()
            self.in_transaction = self.holds_write_lock = False

    def commit(self) -> None:
        # On the thread: a commit may run a WAL checkpoint, with its syncs.
        if self.in_transaction:
            super().commit()
            self.in_transaction = self.holds_write_lock = False


@contextlib.contextmanager
def reads_inline(connection: AsyncConnection | Connection) -> Iterator[None]:
    """While open, `connection`'s statements outside a transaction run on the calling
    thread. For short reads only: a long one would hold up the whole event loop."""
    adapted = _one_trip_connection(connection)
    if adapted is None:
        yield
        return
    adapted.reads_inline = True
    try:
        yield
    finally:
        adapted.reads_inline = False


@contextlib.contextmanager
def writes_inline(connection: AsyncConnection | Connection) -> Iterator[None]:
    """While open, the statements of `connection`'s transaction after its first write
    run on the calling thread: the first write (which may wait for the lock) and the
    commit (which may checkpoint) keep the trip. For transactions of a few indexed
    single-row statements only (a message stored, a part marked sent): anything
    longer would hold up the whole event loop."""
    adapted = _one_trip_connection(connection)
    if adapted is None:
        yield
        return
    adapted.writes_inline = True
    try:
        yield
    finally:
        adapted.writes_inline = False


def _one_trip_connection(connection: AsyncConnection | Connection) -> OneTripConnection | None:
    sync = connection.sync_connection if isinstance(connection, AsyncConnection) else connection
    adapted = None if sync is None else sync.connection.dbapi_connection
    return adapted if isinstance(adapted, OneTripConnection) else None


class OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """SQLAlchemy's aiosqlite DBAPI adapter, its connections using `OneTripCursor`."""

    def connect(self, *arg: Any, **kw: Any) -> OneTripConnection:
        adapted = super().connect(*arg, **kw)
        return OneTripConnection(self, adapted._connection)


def one_trip_dbapi() -> OneTripDBAPI:
    return OneTripDBAPI(aiosqlite, sqlite3)
