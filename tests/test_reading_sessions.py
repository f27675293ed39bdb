"""Reads on their own connection (`read`): no transaction is begun for them (on
Postgres no BEGIN and no ROLLBACK), and nothing of that reaches the sessions that write
after them on the same connection."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.engine import read
from memory.storage.models import utcnow
from memory.storage.tables import USERS


def _in_transaction(connection: Connection) -> bool:
    """Whether the driver's connection has a transaction open."""
    driver: Any = connection.connection.driver_connection
    if hasattr(driver, "is_in_transaction"):  # asyncpg
        return bool(driver.is_in_transaction())
    return bool(driver.in_transaction)  # aiosqlite


async def test_a_reader_begins_nothing_and_a_writer_after_it_can_roll_back(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    row = {"id": uuid.uuid4(), "display_name": "Ada", "timezone": "UTC", "created_at": utcnow()}
    async with sessions() as session:
        await session.execute(insert(USERS), row)
        await session.commit()

    def name_read(connection: Connection) -> tuple[Any, bool]:
        return connection.scalar(select(USERS.c.display_name)), _in_transaction(connection)

    assert await read(sessions, name_read) == ("Ada", False)

    # The pool hands the same connection out again: its statements are in a
    # transaction once more, and a rollback undoes them.
    async with sessions() as session:
        await session.execute(insert(USERS), {**row, "id": uuid.uuid4(), "display_name": "Bo"})
        assert await session.run_sync(lambda s: _in_transaction(s.connection()))
        await session.rollback()
    count = select(func.count()).select_from(USERS)
    assert await read(sessions, lambda c: c.scalar(count)) == 1
