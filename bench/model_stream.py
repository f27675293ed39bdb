"""What reading a streamed model reply costs the gateway, against a plain HTTP call.

    python -m bench.model_stream [--calls N] [--pieces 3,200] [--rounds K] [--json]

A fake OpenAI-compatible model (the test suite's) runs in a process of its own and
streams each reply in `pieces` server-sent events, as a real one streams its tokens.
This process makes the calls, so the CPU measured here is the client's only:

- baseline: `httpx.AsyncClient.post` with the same JSON body to the same server, the
  whole response read as bytes: the floor of one HTTP call through httpx (what the
  gateway used before stop 44);
- aiohttp: the same plain call through `aiohttp.ClientSession.post`, the floor of the
  client the gateway uses now;
- gateway: the OpenAI provider's `stream(prompt)`, every piece read, the usage included
  (what a turn does for each model call).

The prompt is a turn's typical size: a 2 KB system prompt and 40 turns of 200
characters. Segments alternate baseline, gateway for every piece count and round;
the ratio of each round is gateway CPU over baseline CPU per call, and the report gives
their median (and the same for the plain aiohttp call).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Any

import aiohttp
import httpx
import uvloop

from bench.memory_support import ROOT
from bench.webhook_ack import child, python_env, wait_for_file
from gateway.llm.base import ChatTurn, Prompt
from gateway.llm.openai import OpenAIProvider

_PIECES = "pieces="


@dataclass(frozen=True)
class Segment:
    what: str
    pieces: int
    round: int
    calls: int
    cpu_us_per_call: float
    wall_ms_per_call: float


def prompt(pieces: int) -> Prompt:
    turns = tuple(
        ChatTurn("user" if i % 2 == 0 else "assistant", f"turn {i}: " + "words " * 33)
        for i in range(40)
    )
    last = ChatTurn("user", f"{_PIECES}{pieces}")
    return Prompt(system="You are a helpful assistant. " * 70, turns=(*turns, last), max_tokens=512)


async def serve_model(port_file: Path) -> None:
    """The fake model, answering in as many pieces as the last message asks. Also a
    model to point a trial `parley serve` at (PARLEY_LLM_BASE_URL: what it writes)."""
    from tests.fakes.llm_server import FakeLLM, Reply
    from tests.support.servers import serve

    def respond(body: dict[str, Any], _: int) -> Reply:
        # The bench sends "pieces=N" alone; a gateway pointed here wraps it in its own
        # words, and anything else gets three.
        asked = re.search(rf"{_PIECES}(\d+)", json.dumps(body["messages"][-1]))
        pieces = max(1, int(asked.group(1))) if asked else 3
        return Reply(" ".join(f"word{i}" for i in range(pieces)), pieces=pieces)

    llm = FakeLLM()
    llm.responder = respond
    async with serve(llm.app) as url:
        llm.base_url = url
        staged = port_file.with_suffix(".tmp")
        staged.write_text(llm.openai_base, encoding="utf-8")
        os.replace(staged, port_file)  # never read half-written
        while True:
            await asyncio.sleep(3600)
            llm.requests.clear()


async def measure(call: Callable[[], Awaitable[None]], calls: int) -> tuple[float, float]:
    """CPU µs and wall ms per call."""
    for _ in range(max(10, calls // 10)):  # warm-up
        await call()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        await call()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / calls * 1e6, wall / calls * 1e3


async def run(calls: int, piece_counts: list[int], rounds: int) -> list[Segment]:
    with tempfile.TemporaryDirectory(prefix="parley-model-") as scratch:
        port_file = Path(scratch) / "model.url"
        async with child(
            "model",
            ["-m", "bench.model_stream", "--serve", str(port_file)],
            python_env(),
            ROOT,
            Path(scratch) / "model.log",
        ) as process:
            base = await wait_for_file(port_file, process, "the model")
            return await _segments(base, calls, piece_counts, rounds)


async def _segments(base: str, calls: int, piece_counts: list[int], rounds: int) -> list[Segment]:
    provider = OpenAIProvider(
        base_url=base,
        api_key="sk-bench",
        model="fake-model",
        timeout=30.0,
        max_retries=0,
        retry_base_seconds=0.1,
    )
    segments = []
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(provider.aclose)
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30.0))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        for round_ in range(1, rounds + 1):
            for pieces in piece_counts:
                calls_ = {
                    "baseline": _plain(client, provider, base, prompt(pieces)),
                    "aiohttp": _plain_aiohttp(session, provider, base, prompt(pieces)),
                    "gateway": _streamed(provider, prompt(pieces)),
                }
                for what, call in calls_.items():
                    cpu, wall = await measure(call, calls)
                    segment = Segment(what, pieces, round_, calls, round(cpu, 1), round(wall, 3))
                    print(_line(segment), file=sys.stderr, flush=True)
                    segments.append(segment)
    return segments


def _plain(
    client: httpx.AsyncClient, provider: OpenAIProvider, base: str, prompt_: Prompt
) -> Callable[[], Awaitable[None]]:
    body, headers = provider.body(prompt_), provider.headers()

    async def call() -> None:
        response = await client.post(f"{base}/chat/completions", json=body, headers=headers)
        response.raise_for_status()

    return call


def _plain_aiohttp(
    session: aiohttp.ClientSession, provider: OpenAIProvider, base: str, prompt_: Prompt
) -> Callable[[], Awaitable[None]]:
    body, headers = provider.body(prompt_), provider.headers()

    async def call() -> None:
        async with session.post(f"{base}/chat/completions", json=body, headers=headers) as got:
            got.raise_for_status()
            await got.read()

    return call


def _streamed(provider: OpenAIProvider, prompt_: Prompt) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        async for _ in provider.stream(prompt_):
            pass

    return call


def _line(s: Segment) -> str:
    return (
        f"{s.what:8} pieces {s.pieces:4} round {s.round}: {s.cpu_us_per_call:8.1f} µs CPU,"
        f" {s.wall_ms_per_call:7.3f} ms wall a call"
    )


def ratios(segments: list[Segment], what: str = "gateway") -> dict[int, float]:
    """Per piece count, the median over rounds of `what`'s CPU / baseline CPU."""
    by: dict[tuple[int, int], dict[str, float]] = {}
    for s in segments:
        by.setdefault((s.pieces, s.round), {})[s.what] = s.cpu_us_per_call
    per: dict[int, list[float]] = {}
    for (pieces, _), pair in by.items():
        per.setdefault(pieces, []).append(pair[what] / pair["baseline"])
    return {pieces: round(median(values), 2) for pieces, values in per.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.model_stream")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--pieces", default="3,200")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        if args.serve:
            runner.run(serve_model(args.serve))
            return
        pieces = [int(p) for p in args.pieces.split(",")]
        segments = runner.run(run(args.calls, pieces, args.rounds))
    ratio_cpu, aiohttp_cpu = ratios(segments), ratios(segments, "aiohttp")
    result = {
        "machine": {"cpus": os.cpu_count(), "load": os.getloadavg()},
        "segments": [asdict(s) for s in segments],
        "ratio_cpu": ratio_cpu,
        "aiohttp_ratio_cpu": aiohttp_cpu,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for count, ratio in ratio_cpu.items():
            print(
                f"{count:4} pieces: the stream costs x{ratio} the plain httpx call's CPU"
                f" (a plain aiohttp call x{aiohttp_cpu[count]})"
            )


if __name__ == "__main__":
    main()
