"""Idle web chat sockets: memory per socket, idle CPU, and delivery to one of them.

    python -m bench.idle_sockets [--sockets N] [--sample S] [--idle-seconds T]
                                 [--open-per-second R] [--clients K] [--no-baseline]
                                 [--json]

The goal (the speed issue): 10,000 idle web chat WebSockets on one `parley serve`, at
most 64 KB of memory per socket, idle CPU under 5% of a core, and a message to any one
of them delivered in under 50 ms.

(a) **gateway**: `python -m gateway serve` as shipped, in its own process, on a migrated
SQLite database in a temporary directory, the offline model, logging at its default
level (INFO) to a file. Only the web chat limits are raised (new sessions and messages
per minute), so that one address may make N visitors.

1. N visitors are made, `POST /webchat/sessions`, at most `--concurrency` at a time.
2. S of them (the sample, chosen at random) write one message over HTTP and get the
   offline model's reply: an operator's message needs a chat to go to.
3. K load-generator processes (`bench.idle_clients`) open the sockets: the first W
   (`--warmup-sockets`) first, then, after `--settle-seconds`, the server's memory is
   read (VmRSS from /proc/PID/status, Pss from smaps_rollup), then the other N - W, then
   after another settle the memory again: memory per socket = the growth / (N - W).
   Each socket sends its `auth` frame and waits for `ready`, then sits idle. They are
   opened at most R a second (`--open-per-second`, 400) on either server: each socket
   is pinged every 30 s from its opening on, and pings bunched in time cost less each
   (fewer wake-ups) than pings spread out, so both servers get theirs spread alike.
4. The server's CPU (user + system, all threads, /proc/PID/stat) over `--idle-seconds`
   with every socket open: idle CPU in % of one core (and its user and system parts).
   The same is read with only the W warm-up sockets open (before step 3's second half),
   to tell what the sockets cost from what the process costs anyway (its sweeps, its
   job runner).
5. Delivery: for each sampled visitor in turn, an operator's message
   (`POST /api/v1/sessions/{id}/messages` with the admin token) and the time until its
   `message` frame is read off that visitor's socket, in the load generator (both
   stamps are CLOCK_MONOTONIC, one clock for every process): p50, p99, max, and each
   in order (the first after the idle window pays for what the quiet put off). One
   delivery before step 4, not measured, takes the path's first-time costs (compiling
   its statements), which a process pays once in its life.
6. The sockets are counted again: every one must still be open.

The gateway's garbage collections in each of steps 3 (after the warm-up sockets), 4 and
5 are read off its `/metrics` (`parley_gc_pause_seconds`): how many of each generation,
their seconds, and how many held the process longer than the delivery goal.

(b) **baseline** (`bench.idle_echo`): a bare FastAPI WebSocket endpoint under the same
uvicorn configuration (`gateway.http.server.server_config`), holding the same N sockets
the same way; its push is `POST /bench/push`. Steps 3-6, without visitors.

File descriptors: 10,000 sockets need 10,000 descriptors in the server and as many
across the load generators. The bench raises its soft RLIMIT_NOFILE to the hard limit
(`resource.setrlimit`); the server and the load generators are its children and inherit
it. If the hard limit is too low the run says so and stops.

Only the processes this script starts are stopped (SIGTERM, then SIGKILL after 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import secrets
import signal
import sys
import time
import uuid
from asyncio.subprocess import Process
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.idle_clients import PROBE_PREFIX
from bench.idle_worker import environment, free_port, measure, wait_until
from bench.memory_support import (
    machine,
    machine_line,
    migrated_engine,
    percentile,
    scratch_dir,
    sqlite_url,
)

GOAL_KB_PER_SOCKET = 64.0
GOAL_CPU_PERCENT = 5.0
GOAL_DELIVERY_MS = 50.0
STOP_DEADLINE_SECONDS = 30.0
DELIVERY_DEADLINE_SECONDS = 10.0
FDS_SPARE = 1024
SESSION_TRIES = 3


@dataclass(frozen=True, slots=True)
class Options:
    sockets: int = 10_000
    sample: int = 50
    idle_seconds: float = 30.0
    settle_seconds: float = 5.0
    warmup_sockets: int = 20
    concurrency: int = 64
    # Both servers get their sockets at one pace, so their pings fall alike in time.
    open_per_second: float | None = 400.0
    clients: int = 2
    baseline: bool = True
    seed: int = 1
    deflate: bool = True
    as_json: bool = False
    command: str = field(default="")


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.idle_sockets",
        description="Memory per idle web chat socket, idle CPU and delivery latency of "
        "`parley serve` holding N sockets, against a bare FastAPI WebSocket app.",
    )
    parser.add_argument("--sockets", type=int, default=10_000, help="N sockets (10000)")
    parser.add_argument("--sample", type=int, default=50, help="deliveries timed (50)")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="CPU measured (30)")
    parser.add_argument(
        "--settle-seconds", type=float, default=5.0, help="wait before reading memory (5)"
    )
    parser.add_argument(
        "--warmup-sockets", type=int, default=20, help="opened before the first reading (20)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=64, help="session POSTs and handshakes at once (64)"
    )
    parser.add_argument(
        "--open-per-second",
        type=float,
        default=400.0,
        help="sockets opened a second, at most, on either server (400; 0: as fast as they go)",
    )
    parser.add_argument("--clients", type=int, default=2, help="load-generator processes (2)")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false")
    parser.add_argument("--seed", type=int, default=1, help="of the sample (1)")
    parser.add_argument(
        "--no-deflate",
        dest="deflate",
        action="store_false",
        help="clients do not offer permessage-deflate (browsers do)",
    )
    parser.add_argument("--json", dest="as_json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if args.sockets < 1 or args.warmup_sockets >= args.sockets:
        parser.error("--sockets must be at least 1 and above --warmup-sockets")
    return Options(
        sockets=args.sockets,
        sample=min(args.sample, args.sockets),
        idle_seconds=args.idle_seconds,
        settle_seconds=args.settle_seconds,
        warmup_sockets=args.warmup_sockets,
        concurrency=args.concurrency,
        open_per_second=args.open_per_second or None,
        clients=max(1, args.clients),
        baseline=args.baseline,
        seed=args.seed,
        deflate=args.deflate,
        as_json=args.as_json,
        command="python -m bench.idle_sockets " + " ".join(sys.argv[1:] if argv is None else argv),
    )


def raise_fd_limit(needed: int) -> dict[str, int]:
    """The soft RLIMIT_NOFILE up to the hard one; children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if target < needed:
        raise SystemExit(
            f"{needed} file descriptors needed, the hard limit is {hard}: raise it "
            "(ulimit -Hn, /etc/security/limits.conf) or give fewer --sockets"
        )
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return {"soft_before": soft, "soft": target, "hard": hard, "needed": needed}


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and (if readable) Pss of a process, in KiB."""
    figures: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            figures["rss_kb"] = int(line.split()[1])
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="ascii").splitlines():
            if line.startswith("Pss:"):
                figures["pss_kb"] = int(line.split()[1])
    return figures


def tail(log: Path, lines: int = 40) -> list[str]:
    return log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]


@contextlib.asynccontextmanager
async def started(
    args: list[str], env: dict[str, str], cwd: Path, log: Path
) -> AsyncIterator[Process]:
    """A process writing to `log`; if the run fails, the log's tail goes to stderr (the
    scratch directory it is in is then deleted)."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *args, cwd=cwd, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        try:
            yield process
        except BaseException:
            print(f"--- the last lines of {log.name}:", *tail(log), sep="\n", file=sys.stderr)
            raise
        finally:
            await stop(process)


async def stop(process: Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_DEADLINE_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()


class LoadGenerator:
    """One `bench.idle_clients` process: commands in, answers and probe frames out."""

    def __init__(self, process: Process, arrivals: dict[str, asyncio.Future[float]]) -> None:
        self.process = process
        self._arrivals = arrivals
        self._answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            payload = json.loads(line)
            if payload.get("event") == "frame":
                arrival = self._arrivals.get(payload["text"])
                if arrival is not None and not arrival.done():
                    arrival.set_result(payload["at"])
            else:
                await self._answers.put(payload)
        await self._answers.put({"event": "exited"})

    async def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        await self.process.stdin.drain()
        answer = await self._answers.get()
        if answer.get("event") == "exited":
            raise RuntimeError("a load generator exited (see its log)")
        return answer

    async def close(self) -> None:
        with contextlib.suppress(RuntimeError, ConnectionError):
            await asyncio.wait_for(self.ask({"cmd": "close"}), STOP_DEADLINE_SECONDS)
        await stop(self.process)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def load_generators(
    options: Options, ws_url: str, work_dir: Path, arrivals: dict[str, asyncio.Future[float]]
) -> AsyncIterator[list[LoadGenerator]]:
    count = options.clients
    generators: list[LoadGenerator] = []
    logs = [(work_dir / f"clients-{i}.log").open("wb") for i in range(count)]
    try:
        for log in logs:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.idle_clients",
                ws_url,
                *([] if options.deflate else ["--no-deflate"]),
                env=environment({}),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
            generators.append(LoadGenerator(process, arrivals))
        yield generators
    finally:
        await asyncio.gather(*(g.close() for g in generators))
        for log in logs:
            log.close()


Push = Callable[[int, str], Awaitable[None]]
# Per generation: collections so far, their seconds, and how many took over 50 ms.
Pauses = Callable[[], Awaitable[dict[str, Any]]]


async def hold(
    options: Options,
    pid: int,
    ws_url: str,
    tokens: list[str],
    sample: list[int],
    push: Push,
    work_dir: Path,
    pauses: Pauses | None = None,
) -> dict[str, Any]:
    """Steps 3-6: open the sockets, read memory, idle CPU, time the deliveries.
    `pauses`: the server's garbage collections so far, if it counts them."""
    arrivals: dict[str, asyncio.Future[float]] = {}
    marks: list[dict[str, Any]] = []

    async def mark() -> None:
        if pauses is not None:
            marks.append(await pauses())

    n, warm = len(tokens), options.warmup_sockets
    async with load_generators(options, ws_url, work_dir, arrivals) as generators:
        share = max(1, options.concurrency // len(generators))
        opened = [
            await generators[0].ask({"cmd": "open", "tokens": tokens[:warm], "concurrency": share})
        ]
        await asyncio.sleep(options.settle_seconds)
        before = memory_kb(pid)
        # The same process with only the warm-up sockets: what is not the sockets'.
        cpu_before = await measure(pid, 0.0, options.idle_seconds)
        await mark()
        began = time.monotonic()
        opened += await asyncio.gather(
            *(
                g.ask(
                    {
                        "cmd": "open",
                        "tokens": tokens[warm + i :: len(generators)],
                        "concurrency": share,
                        "per_second": (
                            None
                            if options.open_per_second is None
                            else options.open_per_second / len(generators)
                        ),
                    }
                )
                for i, g in enumerate(generators)
            )
        )
        open_seconds = time.monotonic() - began
        failed = sum(o["failed"] for o in opened)
        loop = asyncio.get_running_loop()
        post_ms: list[float] = []

        async def deliver(index: int) -> float | None:
            """Milliseconds from the push to its frame on the visitor's socket."""
            text = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
            arrival: asyncio.Future[float] = loop.create_future()
            arrivals[text] = arrival
            sent = time.monotonic()
            await push(index, text)
            post_ms.append((time.monotonic() - sent) * 1000)
            try:
                return (await asyncio.wait_for(arrival, DELIVERY_DEADLINE_SECONDS) - sent) * 1000
            except TimeoutError:
                return None

        # One delivery before the idle window, not measured: a process's first message by
        # this path compiles its statements (30-40 ms on the gateway), once in its life.
        warm_delivery = await deliver(sample[0])
        post_ms.clear()
        await asyncio.sleep(options.settle_seconds)
        after = memory_kb(pid)
        await mark()
        cpu = await measure(pid, 0.0, options.idle_seconds)
        await mark()
        latencies, lost = [], 0
        for index in sample:
            took = await deliver(index)
            if took is None:
                lost += 1
            else:
                latencies.append(took)
            await asyncio.sleep(0.05)  # one at a time: the others stay idle
        await mark()
        statuses = [await g.ask({"cmd": "status"}) for g in generators]
        after_all = memory_kb(pid)
    grown = {k: after[k] - before[k] for k in after if k in before}
    per_socket = {
        k.replace("_kb", "_kb_per_socket"): round(v / (n - warm), 2) for k, v in grown.items()
    }
    in_order = [round(ms, 2) for ms in latencies]
    latencies.sort()
    post_ms.sort()
    return {
        "sockets": n,
        "opened": n - failed,
        "failed_to_open": failed,
        "open_errors": [e for o in opened for e in o["errors"]][:5],
        "open_seconds": round(open_seconds, 2),
        "still_open_at_end": sum(s["open"] for s in statuses),
        "memory_before_kb": before,
        "memory_after_kb": after,
        "memory_at_end_kb": after_all,
        **per_socket,
        "load_generator_rss_kb": [s["rss_kb"] for s in statuses],
        "idle_before": cpu_before,
        "idle": cpu,
        "idle_cpu_percent_per_1000_sockets": round(
            (cpu["cpu_percent_of_one_core"] - cpu_before["cpu_percent_of_one_core"])
            / (n - warm)
            * 1000,
            3,
        ),
        # The server's garbage collections in each step, where it counts them.
        "gc_pauses": {
            step: _pauses_between(marks[i], marks[i + 1])
            for i, step in enumerate(("opening", "idle", "delivery"))
            if len(marks) > i + 1
        },
        "delivery": {
            "sample": len(sample),
            "arrived": len(latencies),
            "lost": lost,
            **(
                {
                    "p50_ms": round(percentile(latencies, 50), 2),
                    "p99_ms": round(percentile(latencies, 99), 2),
                    "max_ms": round(latencies[-1], 2),
                    "post_p50_ms": round(percentile(post_ms, 50), 2),
                    # The first after the idle window pays what the quiet left to do.
                    "in_order_ms": in_order,
                    "warm_up_ms": None if warm_delivery is None else round(warm_delivery, 2),
                }
                if latencies
                else {}
            ),
        },
    }


async def ready_check(process: Process, client: httpx.AsyncClient, base: str, what: str) -> float:
    async def ready() -> bool:
        try:
            response = await client.get(f"{base}/healthz")
        except httpx.TransportError:
            return False
        return response.status_code == 200

    return await wait_until(process, ready, what)


async def gateway_run(options: Options, work_dir: Path) -> dict[str, Any]:
    url = sqlite_url(work_dir / "parley.db")
    engine = await migrated_engine(url)
    await engine.dispose()
    port = free_port()
    admin = "bench-" + secrets.token_hex(16)
    env = environment(
        {
            "PARLEY_DATABASE_URL": url,
            "PARLEY_DATA_DIR": str(work_dir / "data"),
            "PARLEY_HOST": "127.0.0.1",
            "PARLEY_PORT": str(port),
            "PARLEY_ADMIN_TOKEN": admin,
            # One address makes every visitor here; the limits would refuse them.
            "PARLEY_WEBCHAT_SESSIONS_PER_MINUTE": str(10**9),
            "PARLEY_WEBCHAT_MESSAGES_PER_MINUTE": str(10**6),
        }
    )
    base = f"http://127.0.0.1:{port}"
    limits = httpx.Limits(max_connections=options.concurrency)
    async with (
        httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client,
        started(["-m", "gateway", "serve"], env, work_dir, work_dir / "serve.log") as process,
    ):
        start = await ready_check(process, client, base, "parley serve")
        gate = asyncio.Semaphore(options.concurrency)

        refused: list[str] = []

        async def visitor() -> tuple[str, str]:
            async with gate:
                for attempt in range(1, SESSION_TRIES + 1):
                    # A keep-alive connection the server closes as it is reused, or a
                    # 5xx: counted, and tried again (a spare visitor harms nothing).
                    try:
                        response = await client.post("/webchat/sessions")
                    except httpx.TransportError as exc:
                        refused.append(type(exc).__name__)
                        if attempt == SESSION_TRIES:
                            raise
                        continue
                    if response.status_code < 500:
                        break
                    refused.append(str(response.status_code))
                response.raise_for_status()
                body = response.json()
                return str(body["token"]), str(body["conversation_id"])

        began = time.monotonic()
        visitors = await asyncio.gather(*(visitor() for _ in range(options.sockets)))
        sessions_seconds = time.monotonic() - began
        sample = random.Random(options.seed).sample(range(options.sockets), options.sample)
        for index in sample:  # an operator's message goes to the chat last written from
            response = await client.post(
                "/webchat/messages",
                json={"text": "hello"},
                headers={"Authorization": f"Bearer {visitors[index][0]}"},
            )
            response.raise_for_status()

        async def push(index: int, text: str) -> None:
            response = await client.post(
                f"/api/v1/sessions/{visitors[index][1]}/messages",
                json={"text": text, "channel": "webchat"},
                headers={"Authorization": f"Bearer {admin}"},
            )
            response.raise_for_status()

        ws_url = f"ws://127.0.0.1:{port}/webchat/ws"
        tokens = [token for token, _ in visitors]
        figures = await hold(
            options, process.pid, ws_url, tokens, sample, push, work_dir, partial(gc_pauses, client)
        )
    return {
        "app": "gateway (parley serve)",
        "start_seconds": round(start, 2),
        "sessions_seconds": round(sessions_seconds, 2),
        "sessions_retried": dict(Counter(refused)),
    } | figures


async def gc_pauses(client: httpx.AsyncClient) -> dict[str, Any]:
    """The gateway's garbage collections so far, from its /metrics."""
    response = await client.get("/metrics")
    response.raise_for_status()
    found: dict[str, Any] = {}
    for family in text_string_to_metric_families(response.text):
        if family.name != "parley_gc_pause_seconds":
            continue
        for sample in family.samples:
            into = found.setdefault(sample.labels["generation"], {})
            if sample.name.endswith("_count"):
                into["count"] = sample.value
            elif sample.name.endswith("_sum"):
                into["seconds"] = sample.value
            elif (
                sample.name.endswith("_bucket")
                and float(sample.labels["le"]) == GOAL_DELIVERY_MS / 1000
            ):
                into["within_goal"] = sample.value
    return found


def _pauses_between(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {
        generation: {
            "collections": int(now["count"] - then["count"]),
            "seconds": round(now["seconds"] - then["seconds"], 3),
            "over_delivery_goal": int(
                now["count"] - now["within_goal"] - (then["count"] - then["within_goal"])
            ),
        }
        for generation, now in after.items()
        if (then := before.get(generation)) is not None
    }


async def baseline_run(options: Options, work_dir: Path) -> dict[str, Any]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with (
        httpx.AsyncClient(base_url=base, timeout=60) as client,
        started(
            ["-m", "bench.idle_echo", "--port", str(port)],
            environment({}),
            work_dir,
            work_dir / "echo.log",
        ) as process,
    ):
        start = await ready_check(process, client, base, "the baseline")
        tokens = [f"visitor-{i}" for i in range(options.sockets)]
        sample = random.Random(options.seed).sample(range(options.sockets), options.sample)

        async def push(index: int, text: str) -> None:
            response = await client.post("/bench/push", json={"token": tokens[index], "text": text})
            response.raise_for_status()

        ws_url = f"ws://127.0.0.1:{port}/webchat/ws"
        figures = await hold(options, process.pid, ws_url, tokens, sample, push, work_dir)
    return {"app": "baseline (bare FastAPI socket)", "start_seconds": round(start, 2)} | figures


def goals(gateway: dict[str, Any]) -> dict[str, Any]:
    delivery = gateway["delivery"]
    return {
        "kb_per_socket": {
            "goal": GOAL_KB_PER_SOCKET,
            "measured": gateway.get("rss_kb_per_socket"),
            "met": gateway.get("rss_kb_per_socket", float("inf")) <= GOAL_KB_PER_SOCKET,
        },
        "idle_cpu_percent": {
            "goal": GOAL_CPU_PERCENT,
            "measured": gateway["idle"]["cpu_percent_of_one_core"],
            "met": gateway["idle"]["cpu_percent_of_one_core"] < GOAL_CPU_PERCENT,
        },
        "delivery_ms": {
            "goal": GOAL_DELIVERY_MS,
            "measured_max": delivery.get("max_ms"),
            "met": delivery["lost"] == 0
            and delivery.get("max_ms", float("inf")) < GOAL_DELIVERY_MS,
        },
        "all_sockets_held": gateway["still_open_at_end"] == gateway["sockets"],
    }


async def run(options: Options) -> dict[str, Any]:
    per_side = options.sockets + FDS_SPARE
    fds = raise_fd_limit(per_side)
    facts = machine()
    async with scratch_dir("parley-bench-sockets-") as work_dir:
        (work_dir / "gateway").mkdir()
        results = [await gateway_run(options, work_dir / "gateway")]
        if options.baseline:
            (work_dir / "baseline").mkdir()
            results.append(await baseline_run(options, work_dir / "baseline"))
    report: dict[str, Any] = {
        "machine": facts,
        "load_average_end_1m": round(os.getloadavg()[0], 2),
        "command": options.command,
        "database": "sqlite",
        "options": {
            "sockets": options.sockets,
            "sample": options.sample,
            "idle_seconds": options.idle_seconds,
            "settle_seconds": options.settle_seconds,
            "warmup_sockets": options.warmup_sockets,
            "clients": options.clients,
            "open_per_second": options.open_per_second,
            "client_offers_deflate": options.deflate,
        },
        "fd_limit": fds,
        "results": results,
        "goals": goals(results[0]),
    }
    if options.baseline:
        gw, bl = results
        report["ratio_kb_per_socket"] = (
            round(gw["rss_kb_per_socket"] / bl["rss_kb_per_socket"], 2)
            if bl.get("rss_kb_per_socket", 0) > 0
            else None
        )
    return report


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def render(report: dict[str, Any]) -> str:
    lines = [
        f"Parley idle web chat sockets: {machine_line(report['machine'])} "
        f"(→ {report['load_average_end_1m']:.2f} at the end)",
        f"{report['command']}; SQLite; {report['options']['clients']} load-generator "
        f"processes; clients offer permessage-deflate: "
        f"{report['options'].get('client_offers_deflate', True)}; fd limit {report['fd_limit']['soft']}",
        "",
        f"{'app':<32}{'open':>7}{'held':>7}{'KB/sock RSS':>12}{'KB/sock Pss':>12}"
        f"{'idle % W→N':>14}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}",
    ]
    for r in report["results"]:
        d = r["delivery"]
        lines.append(
            f"{r['app']:<32}{r['opened']:>7}{r['still_open_at_end']:>7}"
            f"{r.get('rss_kb_per_socket', float('nan')):>12.1f}"
            f"{r.get('pss_kb_per_socket', float('nan')):>12.1f}"
            f"{r.get('idle_before', {}).get('cpu_percent_of_one_core', float('nan')):>7.2f}"
            f"{r['idle']['cpu_percent_of_one_core']:>7.2f}"
            f"{d.get('p50_ms', float('nan')):>8.2f}{d.get('p99_ms', float('nan')):>8.2f}"
            f"{d.get('max_ms', float('nan')):>8.2f}"
        )
        for step, pauses in r.get("gc_pauses", {}).items():
            lines.append(
                f"  garbage collections while {step}: "
                + "; ".join(
                    f"gen {g} ×{p['collections']} {p['seconds'] * 1000:.0f} ms"
                    f" ({p['over_delivery_goal']} over {GOAL_DELIVERY_MS:.0f} ms)"
                    for g, p in pauses.items()
                )
            )
        if r["failed_to_open"] or d["lost"]:
            lines.append(
                f"  failed to open {r['failed_to_open']} {r['open_errors']}; "
                f"deliveries lost {d['lost']}"
            )
    if "ratio_kb_per_socket" in report:
        lines.append(f"gateway/baseline memory per socket: ×{report['ratio_kb_per_socket']}")
    g = report["goals"]
    lines.append(
        f"goals: ≤ {g['kb_per_socket']['goal']:.0f} KB/socket {verdict(g['kb_per_socket']['met'])}; "
        f"idle < {g['idle_cpu_percent']['goal']:.0f}% {verdict(g['idle_cpu_percent']['met'])}; "
        f"delivery < {g['delivery_ms']['goal']:.0f} ms {verdict(g['delivery_ms']['met'])}; "
        f"all sockets held: {g['all_sockets_held']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    report = asyncio.run(run(options))
    print(json.dumps(report, indent=2) if options.as_json else render(report))


if __name__ == "__main__":
    main()
