"""A whole turn's CPU against the live window's size: 10 vs 2,000 live messages.

    python -m bench.live_window [--small N] [--large N] [--turns T] [--warmup W]
                                [--profile PATH] [--json]

The goal (the speed issue): a turn with 2,000 live messages costs at most 1.2x one with
10, because the live window's views, rendering and token counts are kept between turns
rather than read and rebuilt on every one.

One process builds the gateway's services (`Services.build`, SQLite in a temporary
directory, the model `ZeroLatencyLLM`, which answers at once) and two web chat
conversations: one with `--small` live messages, one with `--large` (short texts,
stored through `Messages.add_message` as the inbox stores them). The live window limit
is raised so the archive never cuts them: the window stays the size it was given.

A measured turn is what the runner does for one new user message: the message is
stored first (not timed: the inbox's cost, the same at any size), then
`TurnRunner.request` and `TurnRunner.idle` (the archive's before/after, the turn's read,
the prompt, the model, the reply stored) are timed in CPU seconds of this process (all
threads: aiosqlite's too) and in wall seconds. Turns alternate between the sizes, so
drift on a shared machine hits both alike; the figure that counts is the ratio
large/small of the medians of the same run. `--profile PATH` writes a cProfile of the
large conversation's measured turns.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import statistics
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.memory_support import log_to_devnull, machine, machine_line, scratch_dir, sqlite_url
from bench.turn_apps import ZeroLatencyLLM
from gateway.services import Services
from gateway.settings import Settings
from memory.storage.messages import NewMessage
from memory.storage.migrate import migrate
from memory.storage.models import Delivery, Role

GOAL = 1.2


@dataclass
class Options:
    small: int
    large: int
    turns: int
    warmup: int
    profile: Path | None
    as_json: bool


@dataclass
class Subject:
    label: str
    conversation_id: uuid.UUID
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.live_window", description=__doc__)
    parser.add_argument("--small", type=int, default=10, help="live messages (default 10)")
    parser.add_argument("--large", type=int, default=2000, help="live messages (default 2000)")
    parser.add_argument("--turns", type=int, default=200, help="measured turns per size")
    parser.add_argument("--warmup", type=int, default=20, help="turns per size not measured")
    parser.add_argument("--profile", type=Path, help="cProfile of the large turns to PATH")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    return Options(args.small, args.large, args.turns, args.warmup, args.profile, args.json)


async def seed(services: Services, live: int, now: datetime) -> uuid.UUID:
    """A web chat person whose conversation holds `live` messages, half theirs, half
    answers, all answered."""
    messages = services.repos.messages
    person = await services.repos.identities.resolve_identity(
        "webchat", f"bench-{uuid.uuid4().hex}", display_name="Ana", timezone="UTC", now=now
    )
    conversation_id = person.conversation_id
    start = now - timedelta(minutes=live)
    for index in range(live):
        at = start + timedelta(seconds=30 * index)
        if index % 2 == 0:
            new = NewMessage(
                Role.USER,
                "webchat",
                f"a short question number {index}?",
                identity_id=person.identity_id,
            )
        else:
            new = NewMessage(
                Role.ASSISTANT,
                "webchat",
                f"a short answer to {index - 1}.",
                reply_to_seq=index,
                delivery=Delivery.SENT,
            )
        await messages.add_message(conversation_id, new, now=at)
    return conversation_id


async def turn(services: Services, subject: Subject, now: datetime, *, record: bool) -> None:
    await services.repos.messages.add_message(
        subject.conversation_id,
        NewMessage(Role.USER, "webchat", "and one more question?"),
        now=now,
    )
    cpu, wall = time.process_time(), time.perf_counter()
    services.runner.request(subject.conversation_id)
    await services.runner.idle()
    if record:
        subject.cpu.append(time.process_time() - cpu)
        subject.wall.append(time.perf_counter() - wall)


def figures(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
    }


async def run(options: Options) -> dict[str, Any]:
    async with scratch_dir("parley-live-window-") as scratch:
        settings = Settings(
            _env_file=None,
            data_dir=scratch,
            database_url=sqlite_url(scratch / "parley.db"),
            live_window_tokens=10_000_000,
        )
        services = Services.build(settings, llm=ZeroLatencyLLM())
        await migrate(services.engine)
        now = datetime.now(UTC)
        small = Subject("small", await seed(services, options.small, now))
        large = Subject("large", await seed(services, options.large, now))
        profiler = cProfile.Profile() if options.profile else None
        for index in range(options.warmup + options.turns):
            record = index >= options.warmup
            at = now + timedelta(seconds=index)
            # Alternate the order, so neither size always runs right after the other.
            for s in (small, large) if index % 2 else (large, small):
                if profiler is not None and record and s is large:
                    profiler.enable()
                await turn(services, s, at, record=record)
                if profiler is not None:
                    profiler.disable()
        await services.runner.close(5.0)
        await services.engine.dispose()
    if profiler is not None and options.profile is not None:
        profiler.dump_stats(str(options.profile))
    result: dict[str, Any] = {
        "machine": machine(),
        "live_messages": {"small": options.small, "large": options.large},
        "turns": options.turns,
        "cpu": {s.label: figures(s.cpu) for s in (small, large)},
        "wall": {s.label: figures(s.wall) for s in (small, large)},
    }
    for kind in ("cpu", "wall"):
        ratio = result[kind]["large"]["median_ms"] / result[kind]["small"]["median_ms"]
        result[f"{kind}_ratio"] = round(ratio, 3)
    result["goal"] = GOAL
    result["meets_goal"] = result["cpu_ratio"] <= GOAL
    return result


def render(result: dict[str, Any]) -> str:
    sizes = result["live_messages"]
    lines = [machine_line(result["machine"]), f"{result['turns']} measured turns per size"]
    for kind in ("cpu", "wall"):
        for label in ("small", "large"):
            f = result[kind][label]
            lines.append(
                f"{kind:4} {sizes[label]:>6} live: median {f['median_ms']:.2f} ms, "
                f"p90 {f['p90_ms']:.2f} ms, mean {f['mean_ms']:.2f} ms"
            )
    lines.append(
        f"ratio {sizes['large']}/{sizes['small']}: CPU x{result['cpu_ratio']:.2f}, "
        f"wall x{result['wall_ratio']:.2f} (goal <= x{result['goal']}: "
        f"{'met' if result['meets_goal'] else 'NOT met'})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    log_to_devnull()
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
