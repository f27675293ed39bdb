"""The processes the driver kills: a private `redis-server` and the `parley` children.

Each appends its output to a log file under the test's directory, with a line at every
start, so a failed run can be read in order."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tests.support.databases import require_service
from tests.support.polling import eventually
from tests.support.process import free_port

START_SECONDS = 40.0  # a gateway start on a busy 2-core machine, Redis possibly down
MAX_STARTS = 400  # all starts of one process in a run: a crash loop ends the run


class Stopwatch:
    """Seconds since the rig started, for logs and kill records."""

    def __init__(self) -> None:
        self._start = asyncio.get_running_loop().time()

    def __call__(self) -> float:
        return asyncio.get_running_loop().time() - self._start


def note(log: Path, line: str) -> None:
    with log.open("a") as out:
        out.write(f"--- {line} ---\n")


async def spawn(
    command: Sequence[str], *, env: dict[str, str], cwd: Path, log: Path
) -> asyncio.subprocess.Process:
    """Start `command` with stdout and stderr appended to `log`."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        return await asyncio.create_subprocess_exec(
            *command, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=fd, stderr=fd
        )
    finally:
        os.close(fd)


class RedisServer:
    """Without persistence: killed, it comes back empty, as a Redis that lost its data."""

    def __init__(self, directory: Path, stopwatch: Stopwatch) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            require_service("redis-server", FileNotFoundError("no redis-server on PATH"))
        assert binary is not None
        self.port = free_port()
        self.log = directory / "redis.log"
        self._command = [
            binary,
            *("--port", str(self.port), "--bind", "127.0.0.1", "--save", ""),
            *("--appendonly", "no", "--dir", str(directory)),
        ]
        self._directory = directory
        self._stopwatch = stopwatch
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        note(self.log, f"start at {self._stopwatch():.1f}s")
        self._process = await spawn(self._command, env={}, cwd=self._directory, log=self.log)
        await eventually(self._answers, until=bool, seconds=10)

    async def kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()

    async def _answers(self) -> bool:
        client = aioredis.Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            return bool(await client.ping())
        except (RedisError, OSError):
            return False
        finally:
            await client.aclose()


class Child:
    """One `parley` child process. Killed by the driver, it is started again by the
    driver; dying on its own is an unexpected exit, recorded and restarted at once."""

    def __init__(
        self,
        name: str,
        command: str,
        *,
        env: dict[str, str],
        cwd: Path,
        stopwatch: Stopwatch,
        health_url: str | None = None,
    ) -> None:
        self.name = name
        self.log = cwd / f"{name}.log"
        self.starts = 0
        self.failed_starts: list[str] = []
        self.unexpected_exits: list[str] = []
        self._command = [sys.executable, "-m", "gateway", command]
        self._env = env
        self._cwd = cwd
        self._stopwatch = stopwatch
        self._health_url = health_url
        self._process: asyncio.subprocess.Process | None = None
        self._killed: asyncio.subprocess.Process | None = None
        # Starts and kills one at a time: a watcher's restart may race the driver's.
        self._lock = asyncio.Lock()
        self._watchers: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        """Start it (again) and wait until it serves; give up after MAX_STARTS."""
        async with self._lock:
            while not self._closing and not self.alive:
                if self.starts >= MAX_STARTS:
                    raise RuntimeError(f"{self.name} keeps dying; see {self.log}")
                self.starts += 1
                attempt = f"start {self.starts} at {self._stopwatch():.1f}s"
                note(self.log, attempt)
                process = await spawn(self._command, env=self._env, cwd=self._cwd, log=self.log)
                self._process = process
                if await self._came_up(process):
                    note(self.log, f"up at {self._stopwatch():.1f}s")
                    watcher = asyncio.create_task(self._watch(process), name=f"watch:{self.name}")
                    self._watchers.add(watcher)
                    watcher.add_done_callback(self._watchers.discard)
                    return
                self.failed_starts.append(f"{attempt}: exit code {process.returncode}")
                if process.returncode is None:
                    process.kill()
                await process.wait()

    async def kill(self) -> None:
        """SIGKILL it (if it runs) and reap it."""
        async with self._lock:
            process = self._process
            if process is not None and process.returncode is None:
                self._killed = process
                process.kill()
                await process.wait()

    async def close(self) -> None:
        self._closing = True
        await self.kill()
        for watcher in list(self._watchers):
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)

    async def _came_up(self, process: asyncio.subprocess.Process) -> bool:
        """It serves: `/healthz` answers, for `serve`; a worker, once started."""
        if self._health_url is None:
            return True
        url = self._health_url

        async def healthy() -> bool | None:  # None: it died while starting
            if process.returncode is not None:
                return None
            try:
                return (await client.get(url)).status_code == 200
            except httpx.TransportError:
                return False

        async with httpx.AsyncClient(timeout=2) as client:
            try:
                up = await eventually(
                    healthy, until=lambda ok: ok is not False, seconds=START_SECONDS, interval=0.1
                )
            except TimeoutError:
                return False
        return up is True

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if self._closing or process is self._killed or process is not self._process:
            return
        self.unexpected_exits.append(f"{self.name} exited with {code} at {self._stopwatch():.1f}s")
        await self.start()


class Processes:
    """Redis, the `parley serve` replicas and the workers, as the driver kills and
    restarts them."""

    def __init__(self, redis: RedisServer, serves: list[Child], workers: list[Child]) -> None:
        self.redis = redis
        self.serves = serves
        self.workers = workers

    @property
    def children(self) -> list[Child]:
        return [*self.serves, *self.workers]

    def named(self, name: str | None) -> Child | None:
        return next((c for c in self.children if c.name == name), None)

    async def start_dead(self, children: Sequence[Child] | None = None) -> None:
        """Start again those of `children` (default: all) that are not running."""
        chosen = self.children if children is None else children
        await asyncio.gather(*(c.start() for c in chosen if not c.alive))
