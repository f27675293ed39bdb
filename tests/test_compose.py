"""The deployment: docker-compose.yml against the Compose specification and the shape
DESIGN §7 asks for, the Dockerfile's habits, and the same shape run natively."""

from __future__ import annotations

import asyncio
import importlib.resources
import json
import re
import signal
from pathlib import Path
from typing import Any

import jsonschema

from tests.support import databases
from tests.support.compose_native import (
    COMPOSE,
    ENV_EXAMPLE,
    converse,
    load_compose,
    native_shape,
    stop,
)
from tests.support.process import REPO
from tests.support.redis import fresh_redis

SCHEMA = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"


def test_the_compose_file_follows_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())

    jsonschema.validate(load_compose(), schema)  # raises with the path of what is wrong


def test_the_compose_file_has_the_shape_of_a_deployment() -> None:
    services: dict[str, Any] = load_compose()["services"]
    after_migrate = {
        "migrate": {"condition": "service_completed_successfully"},
        "postgres": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
    }

    assert set(services) == {"postgres", "redis", "migrate", "gateway", "worker"}
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name, command in (("gateway", ["serve"]), ("worker", ["worker"])):
        assert services[name]["command"] == command
        assert services[name]["depends_on"] == after_migrate
        assert services[name]["deploy"]["replicas"] >= 1
        assert "container_name" not in services[name]  # it would stop --scale
    for name in ("postgres", "redis", "gateway", "worker"):
        assert services[name]["healthcheck"]["test"]
    assert "/readyz" in " ".join(services["gateway"]["healthcheck"]["test"])
    assert services["worker"]["healthcheck"]["test"] == ["CMD", "parley", "worker", "--check"]
    for name in ("migrate", "gateway", "worker"):
        environment = services[name]["environment"]
        assert environment["PARLEY_DATABASE_URL"].startswith("postgresql+asyncpg://")
        assert environment["PARLEY_REDIS_URL"].startswith("redis://redis:")
        assert services[name]["env_file"] == ".env"
    assert "postgres-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]


def test_the_image_is_small_unprivileged_and_checks_its_own_health() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    instructions = [
        line.split()[0] for line in dockerfile.splitlines() if re.match(r"^[A-Z]+\s", line)
    ]

    assert instructions.count("FROM") == 2  # build stage, runtime stage
    assert all("slim" in line for line in dockerfile.splitlines() if line.startswith("FROM"))
    user = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert user
    assert user[-1] not in {"root", "0"}
    assert "HEALTHCHECK" in instructions
    assert 'ENTRYPOINT ["parley"]' in dockerfile
    assert ".venv" in (REPO / ".dockerignore").read_text()


def test_the_env_example_leaves_the_secrets_to_fill_in() -> None:
    lines = ENV_EXAMPLE.read_text().splitlines()

    assert "PARLEY_SECRET_KEY=" in lines
    assert "POSTGRES_PASSWORD=" in lines
    assert "${POSTGRES_PASSWORD:?" in COMPOSE.read_text()  # compose refuses it empty


def test_the_compose_shape_runs_natively_through_both_gateways(tmp_path: Path) -> None:
    async def run(url: str) -> tuple[list[dict[str, Any]], bool, dict[str, int]]:
        async with native_shape(tmp_path, url, await fresh_redis()) as shape:
            messages = await converse(shape)
            worker_alive = shape.processes["worker"].poll() is None
            return messages, worker_alive, await stop(shape)

    with databases.empty_postgres_database() as url:
        messages, worker_alive, codes = asyncio.run(run(url))

    assert [(m["seq"], m["role"]) for m in messages] == [
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "assistant"),
    ]
    assert [m["text"] for m in messages if m["role"] == "user"] == [
        "hello from the first",
        "and from the second",
    ]
    assert worker_alive
    # uvicorn re-raises the SIGTERM it handled once it has shut down cleanly.
    assert codes == {"gateway-0": -signal.SIGTERM, "gateway-1": -signal.SIGTERM, "worker": 0}
