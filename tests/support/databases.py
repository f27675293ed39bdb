"""Test databases: a migrated SQLite file per test, a migrated Postgres database per run.

Postgres tests skip with a reason when no server answers, except under CI=true,
where a missing server fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text

from memory.storage.engine import create_engine
from memory.storage.migrate import migrate
from memory.storage.models import Base

IN_CI = os.environ.get("CI", "").lower() == "true"
POSTGRES_ADMIN_URL = os.environ.get(
    "PARLEY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def require_service(name: str, error: Exception) -> None:
    message = f"{name} is not reachable ({type(error).__name__}: {error})"
    if IN_CI:
        pytest.fail(f"{message}; CI=true requires it", pytrace=False)
    pytest.skip(f"{message}; set it up or run under CI=true to require it")


async def _migrated(url: str) -> None:
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def sqlite_template(directory: Path) -> Path:
    path = directory / "template.db"
    asyncio.run(_migrated(f"sqlite+aiosqlite:///{path}"))
    return path


def sqlite_copy(template: Path, directory: Path) -> str:
    target = directory / "parley.db"
    shutil.copyfile(template, target)
    return f"sqlite+aiosqlite:///{target}"


async def _admin(statement: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


def postgres_database() -> Generator[str, None, None]:
    """Create a private, migrated database for this test run; drop it afterwards."""
    name = f"parley_test_{uuid.uuid4().hex[:12]}"
    try:
        asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        require_service("PostgreSQL", exc)
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    url = f"{base}/{name}"
    try:
        asyncio.run(_migrated(url))
        yield url
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def truncate_postgres(url: str) -> None:
    engine = create_engine(url)
    try:
        tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
        async with engine.begin() as connection:
            await connection.execute(text(f"TRUNCATE {tables} CASCADE"))
    finally:
        await engine.dispose()


@contextlib.contextmanager
def empty_postgres_database() -> Iterator[str]:
    """A Postgres database with no schema at all, dropped afterwards."""
    name = f"parley_empty_{uuid.uuid4().hex[:12]}"
    try:
        asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        require_service("PostgreSQL", exc)
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
