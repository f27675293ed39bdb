"""The lifespan owns every resource: a start that fails part-way releases exactly what
was started, and shutdown runs every stage even when one of them fails."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.errors import ConfigError
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import make_settings


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_connector_that_cannot_start_leaves_no_task_file_or_connection(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with tg.fake_telegram() as fake:
        fake.fail("getMe", tg.TgFail(401, "Unauthorized"))
        settings = make_settings(
            database_url, tmp_path, llm, **tg.telegram_settings(fake), telegram_policy="open"
        )
        app = create_app(settings)
        services = app.state.services
        tasks, files = asyncio.all_tasks(), _open_files()
        with pytest.raises(ConfigError, match="PARLEY_TELEGRAM_TOKEN"):
            async with app.router.lifespan_context(app):
                pass
        leaked = {t for t in asyncio.all_tasks() - tasks if not t.done()}

    # Web chat had started and the job runner's sweeper was running: both were undone.
    assert leaked == set()
    assert services.engine.pool.checkedout() == 0
    assert _open_files() <= files


async def test_shutdown_goes_on_past_a_stage_that_fails(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    app = create_app(make_settings(database_url, tmp_path, llm))
    services = app.state.services
    closed: list[str] = []

    async def broken_stop() -> None:
        closed.append("webchat")
        raise RuntimeError("a connector that fails to stop")

    close_queue = services.queue.close

    async def queue_close() -> None:
        closed.append("jobs")
        await close_queue()

    (webchat,) = services.connectors
    webchat.stop = broken_stop
    services.queue.close = queue_close
    async with app.router.lifespan_context(app):
        pass

    assert closed == ["webchat", "jobs"]
    assert services.engine.pool.checkedout() == 0
