"""`parley` as a real child process, for start-up, crash and CLI tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
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


@dataclass
class Served:
    """A running `parley serve`; what it writes to stderr is read as it comes (a full
    pipe would stop the server)."""

    process: asyncio.subprocess.Process
    _stderr: asyncio.Task[bytes]

    def send_signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    async def stop(self, sig: signal.Signals = signal.SIGTERM, seconds: float = 30) -> str:
        """Send `sig`; once the process has exited, all it wrote to stderr."""
        await stop_process(self.process, sig, seconds)
        return (await asyncio.wait_for(self._stderr, seconds)).decode()


@contextlib.asynccontextmanager
async def parley_serve(env: dict[str, str], cwd: Path) -> AsyncIterator[Served]:
    """Start `parley serve`, wait until /healthz answers, SIGKILL it on exit if alive."""
    process = await start_parley("serve", env=env, cwd=cwd, stderr=asyncio.subprocess.PIPE)
    assert process.stderr is not None
    served = Served(process, asyncio.create_task(process.stderr.read()))
    url = f"http://127.0.0.1:{env['PARLEY_PORT']}"

    async def healthy() -> bool:
        if process.returncode is not None:
            raise RuntimeError(f"parley serve exited: {await served.stop()}")
        try:
            async with httpx.AsyncClient() as client:
                return (await client.get(f"{url}/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    try:
        await eventually(healthy, until=bool, seconds=30)
        yield served
    finally:
        await served.stop(signal.SIGKILL, seconds=10)


async def start_parley(
    *args: str,
    env: dict[str, str],
    cwd: Path,
    stderr: int = asyncio.subprocess.DEVNULL,
    stdout: int = asyncio.subprocess.DEVNULL,
) -> asyncio.subprocess.Process:
    """`parley <args>` as a child process (its stdout discarded unless asked for)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        env=env,
        cwd=cwd,
        stdout=stdout,
        stderr=stderr,
    )


async def ready(port: int, seconds: float = 60) -> None:
    """Until the gateway on `port` answers /readyz with 200."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:

        async def status() -> int:
            try:
                return (await client.get("/readyz")).status_code
            except httpx.TransportError:
                return 0

        await eventually(status, until=lambda code: code == 200, seconds=seconds)


async def parley_output(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """`parley <args>` without blocking the event loop (and the fakes it serves): its
    exit code and stdout."""
    process = await start_parley(*args, env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    out = await asyncio.wait_for(process.stdout.read(), 120)
    return await asyncio.wait_for(process.wait(), 30), out.decode()


async def stop_process(
    process: asyncio.subprocess.Process, sig: signal.Signals = signal.SIGKILL, seconds: float = 10
) -> int:
    """Send `sig` unless the process has exited already; its exit code."""
    if process.returncode is None:
        process.send_signal(sig)
    return await asyncio.wait_for(process.wait(), seconds)
