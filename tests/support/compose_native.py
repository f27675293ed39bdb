"""docker-compose.yml's shape brought up natively, where no container engine runs.

The same services with the same commands and settings, as local processes: the
one-shot `migrate` runs to completion first, then two `serve` replicas on two ports and
one `worker`, against the local Postgres and Redis. A conversation then goes through
both gateways. Run it alone with `python -m tests.support.compose_native`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support import databases
from tests.support.polling import eventually
from tests.support.process import REPO, free_port, parley_env
from tests.support.redis import fresh_redis

COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"


def load_compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def env_example() -> dict[str, str]:
    """What `.env.example` sets (the `env_file` a deployment copies from it), but the
    values left empty for the operator to fill in (here: the test's own)."""
    pairs = (
        line.split("=", 1)
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs if value.strip()}


@dataclass
class Shape:
    gateways: list[str]  # base URLs
    processes: dict[str, subprocess.Popen[str]]


def _command(compose: dict[str, Any], service: str) -> list[str]:
    """What the service's container runs: the image's entrypoint and the command."""
    return [sys.executable, "-m", "gateway", *compose["services"][service]["command"]]


def _settings(compose: dict[str, Any], database_url: str, redis_url: str) -> dict[str, str]:
    environment = compose["services"]["gateway"]["environment"]
    local = {"PARLEY_DATABASE_URL": database_url, "PARLEY_REDIS_URL": redis_url}
    assert set(environment) == set(local), "the compose file sets settings this run does not"
    return {
        key.removeprefix("PARLEY_").lower(): value
        for key, value in (env_example() | local).items()
        if key.startswith("PARLEY_")
    }


@contextlib.asynccontextmanager
async def native_shape(
    workdir: Path, database_url: str, redis_url: str, *, gateways: int = 2
) -> AsyncIterator[Shape]:
    compose = load_compose()
    settings = _settings(compose, database_url, redis_url)
    migrate = await asyncio.to_thread(
        subprocess.run,
        _command(compose, "migrate"),
        env=parley_env(**settings, data_dir=str(workdir / "migrate")),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if migrate.returncode != 0:  # service_completed_successfully: nothing else starts
        raise RuntimeError(f"migrate failed: {migrate.stderr}")
    with _processes() as processes:
        urls = []
        for index in range(gateways):
            port = free_port()
            env = parley_env(**settings, data_dir=str(workdir / f"gateway-{index}"))
            env |= {"PARLEY_HOST": "127.0.0.1", "PARLEY_PORT": str(port)}
            processes[f"gateway-{index}"] = _start(_command(compose, "gateway"), env, workdir)
            urls.append(f"http://127.0.0.1:{port}")
        worker_env = parley_env(**settings, data_dir=str(workdir / "worker"))
        processes["worker"] = _start(_command(compose, "worker"), worker_env, workdir)
        for url in urls:  # the gateway's healthcheck: /readyz
            await eventually(functools.partial(_ready, url, processes), until=bool, seconds=60)
        yield Shape(urls, processes)


def _start(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


@contextlib.contextmanager
def _processes() -> Iterator[dict[str, subprocess.Popen[str]]]:
    processes: dict[str, subprocess.Popen[str]] = {}
    try:
        yield processes
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
            if process.stderr:
                process.stderr.close()


async def _ready(url: str, processes: dict[str, subprocess.Popen[str]]) -> bool:
    for name, process in processes.items():
        if process.poll() is not None:
            stderr = process.stderr.read() if process.stderr else ""
            raise RuntimeError(f"{name} exited with {process.returncode}: {stderr[-2000:]}")
    try:
        async with httpx.AsyncClient() as client:
            return (await client.get(f"{url}/readyz")).status_code == 200
    except httpx.TransportError:
        return False


async def stop(shape: Shape) -> dict[str, int]:
    """SIGTERM every process, as `docker compose down` does; their exit codes."""
    for process in shape.processes.values():
        process.send_signal(signal.SIGTERM)
    codes = {}
    for name, process in shape.processes.items():
        codes[name] = await asyncio.to_thread(process.wait, 30)
    return codes


async def converse(shape: Shape) -> list[dict[str, Any]]:
    """One visitor talks through the first gateway, then the second; the history as the
    second gateway reads it."""
    first, second = shape.gateways[0], shape.gateways[-1]
    async with httpx.AsyncClient(timeout=30) as client:
        session = (await client.post(f"{first}/webchat/sessions")).json()
        auth = {"Authorization": f"Bearer {session['token']}"}
        for url, text in ((first, "hello from the first"), (second, "and from the second")):
            answer = await client.post(f"{url}/webchat/messages", json={"text": text}, headers=auth)
            if answer.status_code != 200:
                raise RuntimeError(f"{url} answered {answer.status_code}: {answer.text}")
        history = await client.get(f"{second}/webchat/messages", headers=auth)
    messages: list[dict[str, Any]] = history.json()["messages"]
    return messages


async def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch, databases.empty_postgres_database() as url:
        async with native_shape(Path(scratch), url, await fresh_redis()) as shape:
            messages = await converse(shape)
            codes = await stop(shape)
    for message in messages:
        print(f"{message['seq']:>3} {message['role']:<9} {message['text'][:60]}")
    print("exit codes:", codes)


if __name__ == "__main__":
    asyncio.run(main())
