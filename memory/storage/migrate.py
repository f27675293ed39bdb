"""Schema revisions: apply Alembic migrations, or check that they were applied."""

from __future__ import annotations

from pathlib import Path

from alembic.command import upgrade
from alembic.config import Config
from alembic.runtime.environment import NameFilterParentNames, NameFilterType
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

import migrations
from memory.storage.search import is_search_object


class SchemaOutOfDate(Exception):
    """A server database is behind this Parley's migrations."""

    def __init__(self, current: str | None, head: str) -> None:
        self.current = current
        self.head = head
        super().__init__(
            f"database schema is at revision {current or 'none'} but this Parley needs {head}; "
            "run `parley migrate` first"
        )


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    if url:
        config.set_main_option("sqlalchemy.url", url)
    return config


def compared(name: str | None, type_: NameFilterType, parent_names: NameFilterParentNames) -> bool:
    """Whether Alembic's autogenerate compares this database object with the models
    (its `include_name` hook): not search's FTS5 tables, their shadow tables and its
    expression indexes, which migration 0008 makes and no model describes."""
    return name is None or not is_search_object(name)


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("no migrations found")
    return head


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _upgrade(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    upgrade(config, "head")


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as connection:
        return await connection.run_sync(_current)


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to head (idempotent)."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade)


async def prepare(engine: AsyncEngine, *, migrate_embedded: bool) -> None:
    """Migrate an embedded SQLite database; refuse a server database that is behind."""
    if migrate_embedded:
        await migrate(engine)
        return
    current, head = await current_revision(engine), head_revision()
    if current != head:
        raise SchemaOutOfDate(current, head)
