"""One Alembic history for SQLite and Postgres: it builds exactly the models' schema,
and it runs down and up again."""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from memory.storage.engine import create_engine
from memory.storage.migrate import (
    alembic_config,
    compared,
    current_revision,
    head_revision,
    migrate,
)
from memory.storage.models import Base


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_name": compared}
    )
    return list(compare_metadata(context, Base.metadata))


def _downgrade_to_base(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.downgrade(config, "base")


async def test_migrations_build_the_models_schema_and_run_both_ways(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
        async with engine.begin() as connection:
            await connection.run_sync(_downgrade_to_base)
        assert await current_revision(engine) is None
        await migrate(engine)
        assert await current_revision(engine) == head_revision()
        async with engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
    finally:
        await engine.dispose()
