"""The load generator: closed-loop workers on one `httpx.AsyncClient`, and the figures."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

# What one request sends: path, JSON body, headers.
Request = tuple[str, dict[str, Any], dict[str, str]]
# Builds request number `index` for worker `worker`.
RequestMaker = Callable[[int, int], Request]
# Raises if a response is not the expected success.
Check = Callable[[httpx.Response], None]


@dataclass(frozen=True, slots=True)
class Figures:
    app: str
    concurrency: int
    requests: int
    seconds: float
    requests_per_second: float
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    # p50 of the first and of the last tenth of the measured requests: a drift
    # between them means the cost per request grows as the data grows.
    p50_first_tenth_ms: float
    p50_last_tenth_ms: float
    # CPU time (user + system, all threads) per measured request: of the server process
    # (None where /proc is not available) and of this load-generating process.
    server_cpu_ms: float | None
    client_cpu_ms: float


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not ordered:
        raise ValueError("no values")
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def summarise(
    app: str,
    concurrency: int,
    seconds: float,
    latencies: Sequence[tuple[int, float]],
    *,
    server_cpu: float | None,
    client_cpu: float,
) -> Figures:
    """`latencies` holds (request index, seconds) pairs; CPU times are in seconds."""
    by_index = [latency for _, latency in sorted(latencies)]
    ordered = sorted(by_index)
    tenth = max(1, len(by_index) // 10)

    def ms(value: float) -> float:
        return round(value * 1000, 3)

    return Figures(
        app=app,
        concurrency=concurrency,
        requests=len(ordered),
        seconds=round(seconds, 3),
        requests_per_second=round(len(ordered) / seconds, 1),
        mean_ms=ms(sum(ordered) / len(ordered)),
        p50_ms=ms(percentile(ordered, 50)),
        p90_ms=ms(percentile(ordered, 90)),
        p99_ms=ms(percentile(ordered, 99)),
        max_ms=ms(ordered[-1]),
        p50_first_tenth_ms=ms(percentile(sorted(by_index[:tenth]), 50)),
        p50_last_tenth_ms=ms(percentile(sorted(by_index[-tenth:]), 50)),
        server_cpu_ms=None if server_cpu is None else ms(server_cpu / len(ordered)),
        client_cpu_ms=ms(client_cpu / len(ordered)),
    )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Around a measured segment: no garbage collection in the load generator. Once it
    held a few rounds' results, one full collection here took 70 ms in the middle of a
    segment (bench.webhook_ack, Intel Xeon host): nothing was sent meanwhile, the
    overdue requests then went at once, and the p99 charged to the server was the
    generator's. What exists is collected and frozen before, cycles made during the
    segment wait for the end."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


async def drive(
    client: httpx.AsyncClient,
    *,
    concurrency: int,
    count: int,
    make: RequestMaker,
    check: Check,
    first_index: int = 0,
) -> tuple[float, list[tuple[int, float]]]:
    """Send `count` requests from `concurrency` workers, each waiting for its answer
    before sending the next. Returns the wall time and (index, latency) pairs."""
    pending = deque(range(first_index, first_index + count))
    latencies: list[tuple[int, float]] = []

    async def worker(number: int) -> None:
        while pending:
            index = pending.popleft()
            path, body, headers = make(number, index)
            started = time.perf_counter()
            response = await client.post(path, json=body, headers=headers)
            elapsed = time.perf_counter() - started
            check(response)
            latencies.append((index, elapsed))

    return await run_workers(concurrency, worker), latencies


async def run_workers(
    concurrency: int, worker: Callable[[int], Coroutine[Any, Any, None]]
) -> float:
    """Run workers 0 … `concurrency` - 1 to their end, the collector paused; the wall
    time they took."""
    with collector_paused():
        started = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for number in range(concurrency):
                group.create_task(worker(number))
        return time.perf_counter() - started
