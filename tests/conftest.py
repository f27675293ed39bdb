from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.storage.engine import create_engine, session_factory
from tests.fakes.llm_server import FakeLLM, fake_llm
from tests.support import databases
from tests.support.world import World, build_world


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return databases.sqlite_template(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(scope="session")
def _postgres_url() -> Iterator[str]:
    yield from databases.postgres_database()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, _sqlite_template: Path, tmp_path: Path) -> str:
    """An empty, migrated database on each backend."""
    if request.param == "sqlite":
        return databases.sqlite_copy(_sqlite_template, tmp_path)
    url: str = request.getfixturevalue("_postgres_url")
    asyncio.run(databases.truncate_postgres(url))
    return url


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with fake_llm() as server:
        yield server


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions of an empty, migrated database on each backend."""
    engine = create_engine(database_url)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()


@pytest.fixture
async def world(database_url: str, tmp_path: Path) -> AsyncIterator[World]:
    """Two people, a group, an archive and profiles to erase and export."""
    engine = create_engine(database_url)
    try:
        yield await build_world(engine, tmp_path)
    finally:
        await engine.dispose()


@pytest.fixture
async def redis_url() -> str:
    """A real, empty Redis database (skips without Redis; fails under CI=true)."""
    from tests.support.redis import fresh_redis

    return await fresh_redis()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that drives Chromium is a browser test whether or not its module says so:
    CI runs those as a stage of their own."""
    for item in items:
        if {"page", "browser"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.browser)
