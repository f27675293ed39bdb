"""Turn throughput of two gateway replicas against one, on one Postgres database.

    python -m bench.replica_throughput [--database-url URL] [--requests N] [--concurrency C]

One `parley serve`-equivalent server (`bench.turn_server gateway`) is driven with C
closed-loop workers, each a web chat visitor of its own (many conversations), through
the whole turn; then a second replica starts on the same database and the same C
workers are split between the two (worker i talks to replica i mod 2). The figure is
the ratio of the two throughputs, measured in one run. Both replicas share this
machine's cores with Postgres and the load generator: the ratio says how far one
machine's cores carry a second replica, not what a second machine would add.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from bench.memory_support import commit, process_cpu_seconds
from bench.turn_apps import GATEWAY_PATH
from bench.turn_load import Figures, Request, drive, summarise
from bench.turn_overhead import Server, _start, _stop, gateway_workload, prepared_database

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/bench_replicas"


@contextlib.contextmanager
def replica(database_url: str, work_dir: Path) -> Iterator[Server]:
    work_dir.mkdir()  # a data dir of its own: its own lease holder name
    server = _start("gateway", database_url, work_dir)
    try:
        yield server
    finally:
        _stop(server)


async def measure(
    client: httpx.AsyncClient, replicas: Sequence[Server], concurrency: int, requests: int
) -> Figures:
    run = f"replicas{len(replicas)}-{time.monotonic_ns()}"
    warmup = requests // 5
    workload = await gateway_workload(
        client, replicas[0], run, concurrency, warmup + requests, turns=50
    )

    def make(worker: int, index: int) -> Request:
        _, body, headers = workload.make(worker, index)
        target = replicas[worker % len(replicas)].url
        return target + GATEWAY_PATH, body, headers

    await drive(client, concurrency=concurrency, count=warmup, make=make, check=workload.check)
    before = [process_cpu_seconds(r.process.pid) or 0.0 for r in replicas]
    client_before = time.process_time()
    seconds, latencies = await drive(
        client,
        concurrency=concurrency,
        count=requests,
        make=make,
        check=workload.check,
        first_index=warmup,
    )
    client_cpu = time.process_time() - client_before
    after = [process_cpu_seconds(r.process.pid) or 0.0 for r in replicas]
    return summarise(
        f"{len(replicas)} replica(s)",
        concurrency,
        seconds,
        latencies,
        server_cpu=sum(after) - sum(before),
        client_cpu=client_cpu,
    )


async def run(database_url: str, requests: int, concurrency: int) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    async with prepared_database(database_url) as (url, work_dir):
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            with replica(url, work_dir / "a") as first:
                one = await measure(client, [first], concurrency, requests)
                with replica(url, work_dir / "b") as second:
                    two = await measure(client, [first, second], concurrency, requests)
    return {
        "commit": commit(),
        "cpus": os.cpu_count(),
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "one": asdict(one),
        "two": asdict(two),
        "throughput_ratio": round(two.requests_per_second / one.requests_per_second, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replica_throughput", description=__doc__)
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.database_url, args.requests, args.concurrency))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for name in ("one", "two"):
        f = result[name]
        print(
            f"{f['app']:>12}  C={f['concurrency']}  {f['requests_per_second']:7.1f} turns/s  "
            f"p50 {f['p50_ms']:7.2f} ms  p99 {f['p99_ms']:8.2f} ms  "
            f"server CPU {f['server_cpu_ms']} ms/turn"
        )
    print(
        f"two replicas / one: x{result['throughput_ratio']} (commit {result['commit']}, "
        f"{result['cpus']} CPUs, load {result['load_average_1m']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
