"""`parley` as a real child process, for start-up, crash and CLI tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from tests.support.polling import eventually

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# Every replica of a deployment shares one key (required on Postgres).
TEST_SECRET_KEY = "test-secret-key-0123456789abcdef"


def parley_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env |= {"PARLEY_SECRET_KEY": TEST_SECRET_KEY}
    env |= {f"PARLEY_{key.upper()}": value for key, value in settings.items()}
    return env


def run_parley(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "gateway", *args, env=env, cwd=cwd)


def run_python(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@contextlib.asynccontextmanager
async def parley_serve(env: dict[str, str], cwd: Path) -> AsyncIterator[subprocess.Popen[str]]:
    """Start `parley serve`, wait until /healthz answers, SIGKILL it on exit if alive."""
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, not awaited
        [sys.executable, "-m", "gateway", "serve"],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{env['PARLEY_PORT']}"

    async def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError(
                f"parley serve exited: {process.stderr.read() if process.stderr else ''}"
            )
        try:
            async with httpx.AsyncClient() as client:
                return (await client.get(f"{url}/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    try:
        await eventually(healthy, until=bool, seconds=30)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()
