"""The `parley` command as a real process: settings, migrations and crash recovery."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import httpx
import pytest

from tests.fakes.llm_server import FakeLLM, Hang
from tests.support import databases
from tests.support.polling import eventually
from tests.support.process import (
    REPO,
    free_port,
    parley_env,
    parley_output,
    parley_serve,
    run_parley,
    start_parley,
    stop_process,
)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("port", "eighty"),
        ("default_timezone", "Mars/Olympus_Mons"),
        ("llm_provider", "oracle"),
        ("admin_token", "changeme"),
        ("telegram_policy", "everyone"),
        ("database_url", "mysql://localhost/parley"),
    ],
)
def test_a_bad_setting_stops_start_up_with_one_line_naming_it(
    tmp_path: Path, name: str, value: str
) -> None:
    env = parley_env(data_dir=str(tmp_path), **{name: value})
    result = run_parley("serve", env=env, cwd=tmp_path)

    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"parley: invalid setting PARLEY_{name.upper()}:")
    if name == "admin_token":
        assert value not in lines[0]  # a rejected secret is still never echoed


def test_serve_refuses_an_unmigrated_postgres_and_migrate_fixes_it(tmp_path: Path) -> None:
    with databases.empty_postgres_database() as url:
        env = parley_env(data_dir=str(tmp_path), database_url=url, port=str(free_port()))
        refused = run_parley("serve", env=env, cwd=tmp_path)
        migrated = run_parley("migrate", env=env, cwd=tmp_path)
        again = run_parley("migrate", env=env, cwd=tmp_path)

    assert refused.returncode == 2
    assert "run `parley migrate`" in refused.stderr
    assert migrated.returncode == 0, migrated.stderr
    assert "database is at revision" in migrated.stdout
    assert again.returncode == 0


def test_serve_on_postgres_refuses_without_the_shared_secret_key(tmp_path: Path) -> None:
    with databases.empty_postgres_database() as url:
        env = parley_env(data_dir=str(tmp_path), database_url=url, port=str(free_port()))
        del env["PARLEY_SECRET_KEY"]
        refused = run_parley("serve", env=env, cwd=tmp_path)

    assert refused.returncode == 2
    assert "PARLEY_SECRET_KEY must be set" in refused.stderr
    assert not (tmp_path / "secret_key").exists()  # no replica-local key was made


async def test_a_killed_gateway_answers_the_message_after_restart(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Hang())
    env = parley_env(
        data_dir=str(tmp_path),
        database_url=database_url,
        port=str(free_port()),
        llm_provider="openai",
        llm_base_url=llm.openai_base,
        llm_api_key="sk-test",
        llm_timeout_seconds="120",
        secret_key="test-secret-key-0123456789abcdef",
    )
    base = f"http://127.0.0.1:{env['PARLEY_PORT']}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        async with parley_serve(env, tmp_path) as process:
            token = (await http.post("/webchat/sessions")).json()["token"]
            auth = {"Authorization": f"Bearer {token}"}
            pending = asyncio.create_task(
                http.post("/webchat/messages", json={"text": "survive this"}, headers=auth)
            )
            await llm.wait_for_requests(1)
            process.send_signal(signal.SIGKILL)
            with contextlib.suppress(httpx.TransportError):
                await pending

        async with parley_serve(env, tmp_path):
            messages = await eventually(
                lambda: _history(http, auth),
                until=lambda found: any(m["role"] == "assistant" for m in found),
            )

    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "survive this"),
        ("assistant", "reply 2"),
    ]


async def _history(http: httpx.AsyncClient, auth: dict[str, str]) -> list[dict[str, object]]:
    response = await http.get("/webchat/messages", headers=auth)
    messages: list[dict[str, object]] = response.json()["messages"]
    return messages


async def test_worker_check_says_whether_a_worker_is_alive(
    database_url: str, tmp_path: Path, redis_url: str
) -> None:
    env = parley_env(data_dir=str(tmp_path), database_url=database_url, redis_url=redis_url)
    alone, _ = await parley_output("worker", "--check", env=env)
    worker = await start_parley("worker", env=env, cwd=REPO)
    try:
        alive = await eventually(
            lambda: parley_output("worker", "--check", env=env),
            until=lambda answer: answer[0] == 0,
            seconds=60,
            interval=0.5,
        )
    finally:
        await stop_process(worker, signal.SIGTERM, 30)

    assert alone == 1
    assert alive[0] == 0
