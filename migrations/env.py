"""Alembic environment for SQLite and Postgres.

Parley runs migrations on a connection it already holds (passed in
`config.attributes["connection"]`); the `alembic` command line makes its own engine.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from gateway.settings import load_settings
from memory.storage.engine import create_engine
from memory.storage.migrate import compared
from memory.storage.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=compared,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_new_engine(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or load_settings().resolved_database_url
    asyncio.run(_run_with_new_engine(url))


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
