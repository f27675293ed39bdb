"""How much a web chat turn costs over one INSERT, measured on this machine.

    python -m bench.turn_overhead [--requests N] [--concurrency C] [--database-url URL]

Two apps are served by uvicorn, each in its own process, on the same database:

(a) baseline: a bare FastAPI endpoint doing one INSERT into `messages` and a commit;
(b) gateway:  `POST /webchat/messages` of the real gateway, through the whole turn,
    with a model that answers instantly (`bench.turn_apps.ZeroLatencyLLM`).

This process is the load generator (one `httpx.AsyncClient`, closed-loop workers). Each
app gets a warm-up and then N measured requests at concurrency C (latency), and again
at the throughput concurrency (default 8). Each of the gateway's workers talks as its
own web chat visitor, so turns are serialised per conversation as in real use; after
`--turns-per-visitor` turns (default 50) a worker moves on to a new visitor, so that
the figures do not depend on N through the length of the conversations.
"Turn overhead" is p50(gateway) - p50(baseline) at concurrency C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.memory_support import commit, process_cpu_seconds
from bench.turn_apps import BASELINE_PATH, GATEWAY_PATH, gateway_settings
from bench.turn_load import (
    Check,
    Figures,
    Request,
    RequestMaker,
    drive,
    summarise,
)
from bench.turn_server import Kind
from memory.storage.engine import create_engine
from memory.storage.migrate import migrate

ROOT = Path(__file__).resolve().parent.parent
GOAL_MS = 10.0
# A turn reads the whole live window (up to `live_window_tokens`), so its cost grows with
# the conversation; a fresh visitor every 50 turns keeps the figures independent of N.
DEFAULT_TURNS_PER_VISITOR = 50
START_DEADLINE_SECONDS = 60.0
STOP_DEADLINE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Options:
    requests: int
    warmup: int
    concurrency: int
    throughput_concurrency: int
    turns_per_visitor: int
    database_url: str | None
    as_json: bool


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.turn_overhead",
        description="Gateway overhead per web chat turn, against one bare INSERT.",
    )
    parser.add_argument(
        "--requests", type=int, default=2000, help="measured requests per run (default 2000)"
    )
    parser.add_argument(
        "--warmup", type=int, default=200, help="unmeasured requests first (default 200)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, help="workers for the latency run (default 1)"
    )
    parser.add_argument(
        "--throughput-concurrency",
        type=int,
        default=8,
        help="workers for the throughput run (default 8; 0 skips it)",
    )
    parser.add_argument(
        "--turns-per-visitor",
        type=int,
        default=DEFAULT_TURNS_PER_VISITOR,
        help="a gateway worker moves on to a new visitor after this many turns, which bounds "
        f"the conversation a turn reads (default {DEFAULT_TURNS_PER_VISITOR}; 0: one visitor "
        "per worker for the whole run, so conversations grow by 2 messages a turn)",
    )
    parser.add_argument(
        "--database-url",
        help="database for both apps (default: a new SQLite file in a temporary directory)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    for name in ("requests", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    for name in ("warmup", "throughput_concurrency", "turns_per_visitor"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative")
    return Options(
        requests=args.requests,
        warmup=args.warmup,
        concurrency=args.concurrency,
        throughput_concurrency=args.throughput_concurrency,
        turns_per_visitor=args.turns_per_visitor,
        database_url=args.database_url,
        as_json=args.json,
    )


# -- servers ----------------------------------------------------------------------------


@dataclass
class Server:
    kind: Kind
    process: subprocess.Popen[bytes]
    url: str


@contextlib.contextmanager
def running_servers(database_url: str, work_dir: Path) -> Iterator[dict[Kind, Server]]:
    """Start both apps, each in its own process; stop them on the way out."""
    servers: dict[Kind, Server] = {}
    try:
        for kind in ("baseline", "gateway"):
            servers[kind] = _start(kind, database_url, work_dir)
        yield servers
    finally:
        for server in servers.values():
            _stop(server)


def _start(kind: Kind, database_url: str, work_dir: Path) -> Server:
    port_file = work_dir / f"{kind}.port"
    log_path = work_dir / f"{kind}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.turn_server",
                kind,
                "--database-url",
                database_url,
                "--data-dir",
                str(work_dir / "data"),
                "--port-file",
                str(port_file),
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while not port_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
                process.wait()
            output = log_path.read_text(encoding="utf-8", errors="replace")
            raise RuntimeError(f"the {kind} server did not start:\n{output}")
        time.sleep(0.02)
    port = int(port_file.read_text(encoding="utf-8"))
    return Server(kind, process, f"http://127.0.0.1:{port}")


def _stop(server: Server) -> None:
    if server.process.poll() is not None:
        return
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(STOP_DEADLINE_SECONDS)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


# -- the two workloads ------------------------------------------------------------------


def _expect_ok(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")


def _expect_reply(response: httpx.Response) -> None:
    _expect_ok(response)  # 202 would mean the turn did not finish in time
    if response.json().get("reply") is None:
        raise RuntimeError(f"no reply in {response.text}")


def _body(run: str, index: int) -> dict[str, Any]:
    return {"text": f"Benchmark message number {index}.", "client_id": f"{run}-{index}"}


@dataclass(frozen=True, slots=True)
class Workload:
    make: RequestMaker
    check: Check


async def baseline_workload(
    client: httpx.AsyncClient, server: Server, run: str, workers: int, total: int, turns: int
) -> Workload:
    # The same body as the web chat requests, and a header of the same size.
    headers = {"Authorization": "Bearer " + "x" * 80}

    def make(worker: int, index: int) -> Request:
        return server.url + BASELINE_PATH, _body(run, index), headers

    return Workload(make, _expect_ok)


async def gateway_workload(
    client: httpx.AsyncClient, server: Server, run: str, workers: int, total: int, turns: int
) -> Workload:
    """One web chat visitor per worker, or a new one every `turns` turns if `turns` > 0.
    The visitors' sessions are opened before the run starts."""
    per_visitor = turns or total
    tokens: list[str] = []
    for _ in range(workers + total // per_visitor):
        response = await client.post(server.url + "/webchat/sessions")
        if response.status_code != 201:
            raise RuntimeError(f"cannot open a web chat session: {response.text}")
        tokens.append(response.json()["token"])
    # worker -> (its headers, turns its visitor has had)
    current: dict[int, tuple[dict[str, str], int]] = {}

    def make(worker: int, index: int) -> Request:
        headers, used = current.get(worker, ({}, per_visitor))
        if used >= per_visitor:
            headers, used = {"Authorization": f"Bearer {tokens.pop()}"}, 0
        current[worker] = (headers, used + 1)
        return server.url + GATEWAY_PATH, _body(run, index), headers

    return Workload(make, _expect_reply)


WORKLOADS = {"baseline": baseline_workload, "gateway": gateway_workload}


async def measure(
    client: httpx.AsyncClient, server: Server, workers: int, options: Options
) -> Figures:
    # Unique per invocation: client ids must not repeat in a database that is kept.
    run = f"{server.kind}-c{workers}-{uuid.uuid4().hex[:8]}"
    total = options.warmup + options.requests
    workload = await WORKLOADS[server.kind](
        client, server, run, workers, total, options.turns_per_visitor
    )
    if options.warmup:
        await drive(
            client,
            concurrency=workers,
            count=options.warmup,
            make=workload.make,
            check=workload.check,
        )
    server_before = process_cpu_seconds(server.process.pid)
    client_before = time.process_time()
    seconds, latencies = await drive(
        client,
        concurrency=workers,
        count=options.requests,
        make=workload.make,
        check=workload.check,
        first_index=options.warmup,
    )
    client_cpu = time.process_time() - client_before
    server_after = process_cpu_seconds(server.process.pid)
    server_cpu = (
        None if server_before is None or server_after is None else server_after - server_before
    )
    return summarise(
        server.kind, workers, seconds, latencies, server_cpu=server_cpu, client_cpu=client_cpu
    )


# -- the run ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def prepared_database(url: str | None) -> AsyncIterator[tuple[str, Path]]:
    """The database URL (normalised as the gateway does) with its schema at head, and a
    scratch directory for the servers' data, port files and logs."""
    with tempfile.TemporaryDirectory(prefix="parley-bench-") as scratch:
        work_dir = Path(scratch)
        url = url or f"sqlite:///{work_dir / 'parley.db'}"
        resolved = gateway_settings(url, work_dir / "data").resolved_database_url
        engine = create_engine(resolved)
        try:
            await migrate(engine)
        finally:
            await engine.dispose()
        yield resolved, work_dir


async def run(options: Options) -> dict[str, Any]:
    levels = [options.concurrency]
    if options.throughput_concurrency and options.throughput_concurrency != options.concurrency:
        levels.append(options.throughput_concurrency)
    figures: list[Figures] = []
    load_before = os.getloadavg()[0]
    async with prepared_database(options.database_url) as (url, work_dir):
        with running_servers(url, work_dir) as servers:
            limits = httpx.Limits(
                max_connections=max(levels), max_keepalive_connections=max(levels)
            )
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                for workers in levels:
                    for kind in ("baseline", "gateway"):
                        figures.append(await measure(client, servers[kind], workers, options))
    return report(options, url, figures, (load_before, os.getloadavg()[0]))


def report(
    options: Options, url: str, figures: list[Figures], load: tuple[float, float]
) -> dict[str, Any]:
    pairs = {}
    for workers in sorted({f.concurrency for f in figures}):
        a, b = (
            next(f for f in figures if f.app == app and f.concurrency == workers)
            for app in ("baseline", "gateway")
        )
        pairs[str(workers)] = {
            "throughput_ratio": round(b.requests_per_second / a.requests_per_second, 3),
            "p50_ratio": round(b.p50_ms / a.p50_ms, 2),
            "p99_ratio": round(b.p99_ms / a.p99_ms, 2),
        }
    latency = [f for f in figures if f.concurrency == options.concurrency]
    overhead = round(
        next(f.p50_ms for f in latency if f.app == "gateway")
        - next(f.p50_ms for f in latency if f.app == "baseline"),
        3,
    )
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            # Other work on the machine skews the figures; this says how busy it was.
            "load_average_1m": {"before": round(load[0], 2), "after": round(load[1], 2)},
        },
        "commit": commit(),
        "database": url.split("://", 1)[0],
        "requests": options.requests,
        "warmup": options.warmup,
        "turns_per_visitor": options.turns_per_visitor,
        "results": [asdict(f) for f in figures],
        "gateway_vs_baseline": pairs,
        "turn_overhead_p50_ms": overhead,
        "turn_overhead_concurrency": options.concurrency,
        "goal_ms": GOAL_MS,
        "goal_met": overhead <= GOAL_MS,
    }


def _cpu(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def render(result: dict[str, Any]) -> str:
    machine = result["machine"]
    visitors = result["turns_per_visitor"] or "all"
    lines = [
        f"Parley turn overhead: {result['database']}, {machine['cpus']} CPUs, "
        f"Python {machine['python']}, commit {result['commit']}, load average "
        f"{machine['load_average_1m']['before']:.2f} -> {machine['load_average_1m']['after']:.2f}",
        f"{result['requests']} measured requests per row after {result['warmup']} warm-up; "
        f"turns per visitor: {visitors}",
        "",
        f"{'app':<9}{'conc':>5}{'req/s':>8}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}"
        f"{'p50 1st/last 10%':>19}{'CPU/req srv/cli':>18}",
        f"{'':<9}{'':>5}{'':>8}{'ms':>8}{'ms':>8}{'ms':>8}{'ms':>8}{'ms':>19}{'ms':>18}",
    ]
    for row in result["results"]:
        drift = f"{row['p50_first_tenth_ms']:.2f} / {row['p50_last_tenth_ms']:.2f}"
        cpu = f"{_cpu(row['server_cpu_ms'])} / {_cpu(row['client_cpu_ms'])}"
        lines.append(
            f"{row['app']:<9}{row['concurrency']:>5}{row['requests_per_second']:>8.1f}"
            f"{row['p50_ms']:>8.2f}{row['p90_ms']:>8.2f}{row['p99_ms']:>8.2f}"
            f"{row['max_ms']:>8.2f}{drift:>19}{cpu:>18}"
        )
    lines.append("")
    for workers, pair in result["gateway_vs_baseline"].items():
        lines.append(
            f"gateway/baseline at concurrency {workers}: req/s x{pair['throughput_ratio']:.3f}, "
            f"p50 x{pair['p50_ratio']:.2f}, p99 x{pair['p99_ratio']:.2f}"
        )
    verdict = "met" if result["goal_met"] else "NOT met"
    lines.append(
        f"turn overhead (p50 gateway - p50 baseline, concurrency "
        f"{result['turn_overhead_concurrency']}): {result['turn_overhead_p50_ms']:.2f} ms; "
        f"goal <= {result['goal_ms']:.0f} ms: {verdict}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
