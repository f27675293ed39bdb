"""What a whole turn costs on the gateway as shipped, web chat and Telegram, against one INSERT.

    python -m bench.turn_cost [--workloads webchat,telegram] [--turns N] [--warmup W]
                              [--concurrency 1,8] [--rounds K] [--database-url URL] [--json]

Three processes besides this one:
- the fakes (`bench.webhook_fakes`): an OpenAI-compatible model answering at once over
  HTTP (three streamed pieces) and the Telegram Bot API;
- the baseline (`bench.webhook_baseline`): a bare app that checks the same secret, parses
  the same body and does one INSERT + COMMIT;
- the gateway as shipped: `python -m gateway serve`, settings from `PARLEY_*` only, the
  default log level (INFO, JSON lines) to a file, Telegram in webhook mode, the embedded
  job runner.

Closed-loop workers, each its own person (a new one every `--turns-per-person` turns):
- webchat: `POST /webchat/messages`, which answers with the turn's reply;
- telegram: a signed update to `/webhooks/telegram`, then a long poll at the fakes until
  the Bot API has accepted that chat's reply: the turn through delivery (drafts while the
  reply streams, then `sendMessage`).
The baseline takes the same requests (its Telegram endpoint stores the update) and answers
once its row is committed. Segments alternate baseline, gateway for every workload,
concurrency and round, so drift on this noisy machine lands on both.

Per segment: turns a second, latency percentiles, and the server process' CPU (user +
system, from /proc) per turn. Goals (issue 26): CPU per turn <= 4x the baseline's per
request for web chat and <= 5x for Telegram; throughput >= 0.4x at every concurrency;
p50 overhead (gateway p50 - baseline p50 at concurrency 1) <= 5 ms; p99 at concurrency 8
<= 2x the baseline's.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Literal

import httpx

from bench.memory_support import machine, machine_line, process_cpu_seconds
from bench.turn_apps import BASELINE_PATH
from bench.turn_load import Figures, run_workers, summarise
from bench.webhook_ack import scratch_database, three_processes
from bench.webhook_baseline import TELEGRAM_HEADER
from tests.fakes import telegram_api

Workload = Literal["webchat", "telegram"]
WORKLOADS: tuple[Workload, ...] = ("webchat", "telegram")
App = Literal["baseline", "gateway"]
# Goals of issue 26, as ratios against the same run's baseline.
CPU_GOAL: dict[Workload, float] = {"webchat": 4.0, "telegram": 5.0}
THROUGHPUT_GOAL = 0.4
OVERHEAD_GOAL_MS = 5.0
P99_GOAL = 2.0
# A little over the gateway's pace for one Telegram chat (`CHAT_INTERVAL`).
CHAT_REST_SECONDS = 1.1
# The gateway's abuse limits, raised: one client at full speed is the load, not abuse.
SETTINGS = (
    ("webchat_sessions_per_minute", "1000000000"),
    ("webchat_messages_per_minute", "1000000000"),
)

# One turn of worker `worker`, number `index` (from 0 over the whole segment).
Turn = Callable[[int, int], Awaitable[None]]


@dataclass(frozen=True)
class Options:
    workloads: tuple[Workload, ...] = WORKLOADS
    turns: int = 400
    warmup: int = 100
    concurrency: tuple[int, ...] = (1, 8)
    rounds: int = 2
    turns_per_person: int = 50
    database_url: str | None = None
    gateway_log: Path | None = None
    # cProfile stats of the gateway's measured segments (`bench.profiled`); its
    # overhead lands on the gateway's figures, so take ratios from runs without it.
    profile: Path | None = None
    command: str = ""
    pieces: int = 3  # streamed pieces a model reply


@dataclass
class Segment:
    workload: Workload
    round: int
    figures: Figures


@dataclass
class Verdict:
    workload: Workload
    concurrency: int
    cpu_ratio: float
    throughput_ratio: float
    p50_overhead_ms: float
    p99_ratio: float
    met: dict[str, bool] = field(default_factory=dict)


class Load:
    """The requests of both apps: who talks, and what each turn sends and waits for."""

    def __init__(self, client: httpx.AsyncClient, urls: dict[str, str], options: Options) -> None:
        self.client = client
        self.urls = urls
        self.options = options
        self._people = itertools.count(1)
        self._updates = itertools.count(1)
        self._texts = itertools.count(1)

    def _text(self) -> str:
        return f"Benchmark message number {next(self._texts)}, please note it down."

    def turns(self, app: App, workload: Workload) -> Turn:
        per_person = self.options.turns_per_person
        if app == "baseline":
            return self._baseline_webchat if workload == "webchat" else self._baseline_telegram
        if workload == "webchat":
            tokens: dict[int, tuple[str, int]] = {}

            async def webchat(worker: int, index: int) -> None:
                token, used = tokens.get(worker, ("", per_person))
                if used >= per_person:
                    token, used = await self._webchat_session(), 0
                tokens[worker] = (token, used + 1)
                response = await self.client.post(
                    self.urls["gateway"] + "/webchat/messages",
                    json={"text": self._text()},
                    headers={"Authorization": f"Bearer {token}"},
                )
                # 202 would mean the reply did not come while the request waited.
                if response.status_code != 200 or response.json().get("reply") is None:
                    raise RuntimeError(f"web chat: {response.status_code} {response.text}")

            return webchat

        # Telegram takes one message a second per chat (the gateway paces its sends so), so
        # a chat is used again only once that second has passed: a new one meanwhile.
        resting: collections.deque[tuple[float, int, int]] = collections.deque()

        async def telegram(worker: int, index: int) -> None:
            if resting and resting[0][0] <= time.perf_counter():
                _, chat, used = resting.popleft()
            else:
                chat, used = 2_000_000_000 + next(self._people), 0
            await self._post_update(self.urls["gateway"], chat, used + 1)
            response = await self.client.get(f"{self.urls['state']}/replied/{chat}/{used + 1}")
            if response.status_code != 200:
                raise RuntimeError(f"telegram: {response.text}")
            if used + 1 < per_person:
                resting.append((time.perf_counter() + CHAT_REST_SECONDS, chat, used + 1))

        return telegram

    async def _webchat_session(self) -> str:
        response = await self.client.post(self.urls["gateway"] + "/webchat/sessions")
        if response.status_code != 201:
            raise RuntimeError(f"cannot open a web chat session: {response.text}")
        return str(response.json()["token"])

    async def _post_update(self, url: str, chat: int, message_id: int) -> None:
        update = telegram_api.text_update(
            chat,
            self._text(),
            message_id=message_id,
            date=int(time.time()),
            update_id=next(self._updates),
        )
        response = await self.client.post(
            url + "/webhooks/telegram",
            content=json.dumps(update).encode(),
            headers={
                "Content-Type": "application/json",
                TELEGRAM_HEADER: telegram_api.WEBHOOK_SECRET,
            },
        )
        if response.status_code != 200:
            raise RuntimeError(f"webhook: {response.status_code} {response.text}")

    async def _baseline_webchat(self, worker: int, index: int) -> None:
        response = await self.client.post(
            self.urls["baseline"] + BASELINE_PATH,
            json={"text": self._text()},
            # A header of the size of the web chat's bearer token.
            headers={"Authorization": "Bearer " + "x" * 80},
        )
        if response.status_code != 200:
            raise RuntimeError(f"baseline: {response.status_code} {response.text}")

    async def _baseline_telegram(self, worker: int, index: int) -> None:
        await self._post_update(self.urls["baseline"], 1_000_000 + worker, index + 1)


async def closed_loop(
    turn: Turn, concurrency: int, count: int
) -> tuple[float, list[tuple[int, float]]]:
    """`count` turns from `concurrency` workers, each starting its next once its last is
    done. Returns the wall time and (index, seconds) pairs."""
    indexes = iter(range(count))
    latencies: list[tuple[int, float]] = []

    async def worker(number: int) -> None:
        for index in indexes:
            started = time.perf_counter()
            await turn(number, index)
            latencies.append((index, time.perf_counter() - started))

    return await run_workers(concurrency, worker), latencies


async def segment(
    load: Load, pids: dict[App, int], app: App, workload: Workload, concurrency: int
) -> Figures:
    options = load.options
    if options.warmup:
        await closed_loop(load.turns(app, workload), concurrency, options.warmup)
    turn = load.turns(app, workload)
    profiling = options.profile is not None and app == "gateway"
    if profiling:
        os.kill(pids[app], signal.SIGUSR2)
    cpu_before = process_cpu_seconds(pids[app])
    client_before = time.process_time()
    seconds, latencies = await closed_loop(turn, concurrency, options.turns)
    cpu_after = process_cpu_seconds(pids[app])
    if profiling:
        os.kill(pids[app], signal.SIGUSR1)
    server_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return summarise(
        f"{app}/{workload}",
        concurrency,
        seconds,
        latencies,
        server_cpu=server_cpu,
        client_cpu=time.process_time() - client_before,
    )


def gateway_command(profile: Path | None) -> list[str]:
    if profile is None:
        return ["-m", "gateway", "serve"]
    return ["-m", "bench.profiled", str(profile.resolve()), "-m", "gateway", "serve"]


async def run(options: Options) -> dict[str, Any]:
    facts = machine()
    segments: list[Segment] = []
    async with contextlib.AsyncExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="parley-turn-")))
        database_url = await stack.enter_async_context(
            scratch_database(options.database_url, directory)
        )
        started = await stack.enter_async_context(
            three_processes(
                database_url,
                directory,
                gateway_command(options.profile),
                SETTINGS,
                options.gateway_log or directory / "gateway.log",
                ("--pieces", str(options.pieces)),
            )
        )
        urls = {
            "baseline": started.baseline.url,
            "gateway": started.gateway.url,
            "state": started.fakes["state"],
        }
        pids: dict[App, int] = {
            "baseline": started.baseline.process.pid,
            "gateway": started.gateway.process.pid,
        }
        limits = httpx.Limits(max_connections=2 * max(options.concurrency) + 2)
        async with httpx.AsyncClient(limits=limits, timeout=120) as client:
            load = Load(client, urls, options)
            for workload in options.workloads:
                for round_ in range(1, options.rounds + 1):
                    for concurrency in options.concurrency:
                        for app in ("baseline", "gateway"):
                            figures = await segment(load, pids, app, workload, concurrency)
                            segments.append(Segment(workload, round_, figures))
                            print(segment_line(segments[-1]), file=sys.stderr, flush=True)
    return {
        "command": options.command,
        "commit": facts.get("commit"),
        "machine": facts,
        "database": database_url.split("://", 1)[0],
        "turns": options.turns,
        "warmup": options.warmup,
        "turns_per_person": options.turns_per_person,
        "segments": [
            {"workload": s.workload, "round": s.round, **asdict(s.figures)} for s in segments
        ],
        "verdicts": [asdict(v) for v in verdicts(segments, options)],
    }


def verdicts(segments: Sequence[Segment], options: Options) -> list[Verdict]:
    """Per workload and concurrency, the rounds pooled: medians of the per-round ratios."""
    out = []
    for workload in options.workloads:
        for concurrency in options.concurrency:
            pairs = []
            for round_ in range(1, options.rounds + 1):
                a, b = (
                    next(
                        s.figures
                        for s in segments
                        if s.workload == workload
                        and s.round == round_
                        and s.figures.concurrency == concurrency
                        and s.figures.app == f"{app}/{workload}"
                    )
                    for app in ("baseline", "gateway")
                )
                pairs.append((a, b))

            cpu = median([(b.server_cpu_ms or 0) / (a.server_cpu_ms or 1) for a, b in pairs])
            throughput = median([b.requests_per_second / a.requests_per_second for a, b in pairs])
            overhead = median([b.p50_ms - a.p50_ms for a, b in pairs])
            p99 = median([b.p99_ms / a.p99_ms for a, b in pairs])
            verdict = Verdict(
                workload,
                concurrency,
                round(cpu, 2),
                round(throughput, 3),
                round(overhead, 2),
                round(p99, 2),
            )
            verdict.met = {
                "cpu": cpu <= CPU_GOAL[workload],
                "throughput": throughput >= THROUGHPUT_GOAL,
            }
            if concurrency == 1:
                verdict.met["p50_overhead"] = overhead <= OVERHEAD_GOAL_MS
            if concurrency >= 8:
                verdict.met["p99"] = p99 <= P99_GOAL
            out.append(verdict)
    return out


def segment_line(s: Segment) -> str:
    f = s.figures
    return (
        f"{f.app:18} round {s.round} C={f.concurrency:<2} {f.requests_per_second:7.1f} turns/s "
        f"p50 {f.p50_ms:7.2f} p90 {f.p90_ms:7.2f} p99 {f.p99_ms:7.2f} max {f.max_ms:7.2f} ms, "
        f"server CPU {f.server_cpu_ms} ms/turn (client {f.client_cpu_ms})"
    )


def render(result: dict[str, Any]) -> str:
    lines = [
        f"turn cost: {result['turns']} turns a segment (+ {result['warmup']} warm-up), "
        f"{result['turns_per_person']} per person, {result['database']}",
        f"machine: {machine_line(result['machine'])}",
        "",
    ]
    for v in result["verdicts"]:
        met = ", ".join(f"{goal} {'met' if ok else 'NOT met'}" for goal, ok in v["met"].items())
        lines.append(
            f"{v['workload']:8} C={v['concurrency']:<2} CPU x{v['cpu_ratio']}, "
            f"throughput x{v['throughput_ratio']}, p50 overhead {v['p50_overhead_ms']} ms, "
            f"p99 x{v['p99_ratio']}: {met}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.turn_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated")
    parser.add_argument("--turns", type=int, default=Options.turns, help="turns a segment")
    parser.add_argument("--warmup", type=int, default=Options.warmup, help="turns, not measured")
    parser.add_argument("--concurrency", default="1,8", help="comma-separated worker counts")
    parser.add_argument("--rounds", type=int, default=Options.rounds)
    parser.add_argument("--turns-per-person", type=int, default=Options.turns_per_person)
    parser.add_argument("--database-url", help="postgresql://… (a scratch database is made on it)")
    parser.add_argument("--gateway-log", type=Path, help="keep the gateway's log here")
    parser.add_argument(
        "--profile", type=Path, help="write cProfile stats of the gateway's segments here"
    )
    parser.add_argument("--pieces", type=int, default=Options.pieces, help="streamed a reply")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    workloads = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    for name in workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}")
    try:
        concurrency = tuple(int(c) for c in args.concurrency.split(","))
    except ValueError:
        parser.error("--concurrency takes comma-separated integers")
    if args.turns < 1 or args.rounds < 1 or args.turns_per_person < 1 or min(concurrency) < 1:
        parser.error("--turns, --rounds, --turns-per-person and --concurrency must be >= 1")
    options = Options(
        workloads=workloads,
        turns=args.turns,
        warmup=max(0, args.warmup),
        concurrency=concurrency,
        rounds=args.rounds,
        turns_per_person=args.turns_per_person,
        database_url=args.database_url,
        gateway_log=args.gateway_log,
        pieces=max(1, args.pieces),
        profile=args.profile,
        command=shlex.join(
            ["python", "-m", "bench.turn_cost", *(sys.argv[1:] if argv is None else argv)]
        ),
    )
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0 if all(all(v["met"].values()) for v in result["verdicts"]) else 1


if __name__ == "__main__":
    sys.exit(main())
