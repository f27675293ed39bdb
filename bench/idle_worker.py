"""Idle CPU of the archive job runners: an arq worker, and `parley serve`'s embedded one.

    python -m bench.idle_worker [--seconds S] [--warmup W] [--archived N]
                                [--redis-url URL] [--json]

Each runner is started as its own process on a migrated temporary SQLite database, with
nothing to do: (a) `python -m gateway worker` (PARLEY_REDIS_URL, default
redis://127.0.0.1:6379/14), (b) `python -m gateway serve` on a free local port without
Redis, so jobs run in its embedded runner. After it is up (the worker's arq health-check
key appears; the server answers /healthz) and a warm-up of W seconds (default 10, which
covers the sweep run at start), its user + system CPU time (all threads, from
/proc/<pid>/stat) is read every second for S seconds (default 30: three 10-second
sweeps). Idle CPU is the CPU time over the wall time, in percent of one core; the goal
is under 2%.

With `--archived N` the database first gets one conversation with N archived messages
in the shape `bench.context_assembly` builds (nothing pending, nothing unanswered), to
show what the periodic sweep costs once there is history to look through.

Only the processes this script starts are stopped (SIGTERM, then SIGKILL after 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from asyncio.subprocess import Process
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
from redis.asyncio import Redis
from sqlalchemy import update

from bench.context_assembly import seed
from bench.memory_support import (
    ROOT,
    machine,
    machine_line,
    migrated_engine,
    process_cpu_split,
    scratch_dir,
    sqlite_url,
)
from gateway.jobs.arq_worker import QUEUE_NAME
from memory.archive.numbers import MemoryLimits
from memory.storage.models import Conversation

GOAL_PERCENT = 2.0
START_DEADLINE_SECONDS = 60.0
STOP_DEADLINE_SECONDS = 30.0
HEALTH_CHECK_KEY = QUEUE_NAME + ":health-check"  # arq's default suffix


@dataclass(frozen=True, slots=True)
class Options:
    seconds: float
    warmup: float
    archived: int
    redis_url: str
    as_json: bool


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.idle_worker",
        description="Idle CPU of `parley worker` (arq) and of `parley serve`'s embedded runner.",
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="measured (30)")
    parser.add_argument("--warmup", type=float, default=10.0, help="after start-up (10)")
    parser.add_argument(
        "--archived",
        type=int,
        default=0,
        help="archived messages in one conversation in the database first (0)",
    )
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/14",
        help="the worker's Redis (default redis://127.0.0.1:6379/14)",
    )
    parser.add_argument("--json", dest="as_json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    return Options(args.seconds, args.warmup, args.archived, args.redis_url, args.as_json)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This environment without any PARLEY_* setting of the caller's, plus ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env | extra


@contextlib.asynccontextmanager
async def running(
    command: str, env: dict[str, str], work_dir: Path, log: IO[bytes]
) -> AsyncIterator[Process]:
    # The working directory has no .env, so only the settings given here apply.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        command,
        cwd=work_dir,
        env=env,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_DEADLINE_SECONDS)
            except TimeoutError:
                process.kill()
                await process.wait()


async def wait_until(process: Process, ready: Callable[[], Awaitable[bool]], what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < START_DEADLINE_SECONDS:
        if process.returncode is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before it was ready")
        if await ready():
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{what} was not ready within {START_DEADLINE_SECONDS:.0f} s")


async def measure(pid: int, warmup: float, seconds: float) -> dict[str, Any]:
    await asyncio.sleep(warmup)
    first = process_cpu_split(pid)
    if first is None:
        raise RuntimeError("cannot read /proc/<pid>/stat")
    started = time.monotonic()
    previous, per_second = first, []
    while (elapsed := time.monotonic() - started) < seconds:
        await asyncio.sleep(min(1.0, seconds - elapsed))
        now = process_cpu_split(pid)
        if now is None:
            raise RuntimeError("the process exited while it was measured")
        per_second.append(sum(now) - sum(previous))
        previous = now
    wall = time.monotonic() - started
    user, system = (b - a for a, b in zip(first, previous, strict=True))
    cpu = user + system
    return {
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 3),
        "cpu_percent_of_one_core": round(cpu / wall * 100, 3),
        # In the kernel: on loopback that includes the receiving side of what is sent.
        "user_percent_of_one_core": round(user / wall * 100, 3),
        "system_percent_of_one_core": round(system / wall * 100, 3),
        # CPU seconds in the busiest one-second sample (the sweeps show here).
        "busiest_second_cpu_seconds": round(max(per_second), 3),
        "clock_tick_seconds": round(1 / os.sysconf("SC_CLK_TCK"), 3),
    }


async def worker_figures(
    options: Options, database_url: str, work_dir: Path, redis: Redis
) -> dict[str, Any]:
    await redis.delete(HEALTH_CHECK_KEY)  # a stale one from an earlier run would mislead
    queued = int(await redis.zcard(QUEUE_NAME))
    env = environment(
        {
            "PARLEY_DATABASE_URL": database_url,
            "PARLEY_DATA_DIR": str(work_dir / "data"),
            "PARLEY_REDIS_URL": options.redis_url,
        }
    )

    async def ready() -> bool:
        return bool(await redis.exists(HEALTH_CHECK_KEY))

    with (work_dir / "worker.log").open("wb") as log:
        async with running("worker", env, work_dir, log) as process:
            start = await wait_until(process, ready, "the worker")
            figures = await measure(process.pid, options.warmup, options.seconds)
    return {"runner": "arq worker", "start_seconds": round(start, 2), "queued_before": queued} | (
        figures
    )


async def serve_figures(options: Options, database_url: str, work_dir: Path) -> dict[str, Any]:
    port = free_port()
    env = environment(
        {
            "PARLEY_DATABASE_URL": database_url,
            "PARLEY_DATA_DIR": str(work_dir / "data"),
            "PARLEY_HOST": "127.0.0.1",
            "PARLEY_PORT": str(port),
        }
    )
    async with httpx.AsyncClient(timeout=2) as client:

        async def ready() -> bool:
            try:
                response = await client.get(f"http://127.0.0.1:{port}/healthz")
            except httpx.TransportError:
                return False
            return response.status_code == 200

        with (work_dir / "serve.log").open("wb") as log:
            async with running("serve", env, work_dir, log) as process:
                start = await wait_until(process, ready, "the server")
                figures = await measure(process.pid, options.warmup, options.seconds)
    return {"runner": "parley serve (embedded)", "start_seconds": round(start, 2)} | figures


async def prepare(url: str, archived: int) -> None:
    engine = await migrated_engine(url)
    try:
        if archived:
            seeded = await seed(engine, archived, MemoryLimits(), datetime.now(UTC))
            # Nothing unanswered: `serve` would otherwise answer it while measured.
            async with engine.begin() as conn:
                await conn.execute(
                    update(Conversation)
                    .where(Conversation.id == seeded.conversation_id)
                    .values(answered_seq=Conversation.last_user_seq)
                )
    finally:
        await engine.dispose()


async def run(options: Options) -> dict[str, Any]:
    async with scratch_dir("parley-bench-idle-") as work_dir:
        url = sqlite_url(work_dir / "parley.db")
        await prepare(url, options.archived)
        redis = Redis.from_url(options.redis_url)
        try:
            results = [
                await worker_figures(options, url, work_dir, redis),
                await serve_figures(options, url, work_dir),
            ]
        finally:
            await redis.aclose()
    return {
        "machine": machine(),
        "database": "sqlite",
        "archived_messages": options.archived,
        "warmup_seconds": options.warmup,
        "seconds": options.seconds,
        "results": results,
        "goal_percent": GOAL_PERCENT,
        "goal_met": all(r["cpu_percent_of_one_core"] < GOAL_PERCENT for r in results),
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"Parley idle job runners: {machine_line(result['machine'])}",
        f"SQLite with {result['archived_messages']:,} archived messages; "
        f"{result['seconds']:.0f} s measured after a {result['warmup_seconds']:.0f} s warm-up",
        "",
        f"{'runner':<26}{'start s':>9}{'CPU s':>8}{'wall s':>8}{'% core':>8}{'busiest 1 s':>13}",
    ]
    for r in result["results"]:
        lines.append(
            f"{r['runner']:<26}{r['start_seconds']:>9.2f}{r['cpu_seconds']:>8.2f}"
            f"{r['wall_seconds']:>8.1f}{r['cpu_percent_of_one_core']:>8.2f}"
            f"{r['busiest_second_cpu_seconds']:>13.2f}"
        )
    verdict = "met" if result["goal_met"] else "NOT met"
    lines.append(f"goal < {result['goal_percent']:.0f}% of one core for each: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
