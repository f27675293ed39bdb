"""What 100,000 pending reminders cost: a turn, and a sweep that finds nothing due.

    python -m bench.reminder_load [--schedules N] [--turns T] [--warmup W] [--json]

The goals (the reminders issue): 100,000 schedules add no measurable time to a turn,
and a reminder sweep that finds nothing due costs one indexed query.

One process builds the gateway's services twice (`Services.build`, SQLite files in a
temporary directory, the model `ZeroLatencyLLM`): a baseline database with no schedule,
and one with `--schedules` pending reminders spread over 1,000 people, due over the next
year. Each has a web chat conversation of 10 live messages (`bench.live_window.seed`).
Turns alternate between the two, timed as `bench.live_window` times them (CPU of this
process, all threads, and wall); then `Firings.sweep` is run as many times on each,
with nothing due. The figures that count are the ratios loaded/baseline of the medians
of the same run; the sweep's query plan is printed as SQLite gives it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import insert, text

from bench.live_window import Subject, figures, seed, turn
from bench.memory_support import log_to_devnull, machine, machine_line, scratch_dir, sqlite_url
from bench.turn_apps import ZeroLatencyLLM
from gateway.reminders.firing import BATCH
from gateway.services import Services
from gateway.settings import Settings
from memory.storage.migrate import migrate
from memory.storage.models import Schedule, ScheduleKind, ScheduleState
from memory.storage.schedules import due_query

# "No measurable time": within the noise of medians on a shared machine.
GOAL = 1.05
PEOPLE = 1000


@dataclass
class Options:
    schedules: int
    turns: int
    warmup: int
    as_json: bool


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.reminder_load", description=__doc__)
    parser.add_argument("--schedules", type=int, default=100_000, help="pending reminders")
    parser.add_argument("--turns", type=int, default=200, help="measured turns per database")
    parser.add_argument("--warmup", type=int, default=20, help="turns not measured")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    return Options(args.schedules, args.turns, args.warmup, args.json)


async def fill(services: Services, count: int, now: datetime) -> None:
    """`count` pending reminders of PEOPLE people, due over the next year."""
    owners = [
        (
            await services.repos.identities.resolve_identity(
                "webchat", f"load-{n}", display_name="", timezone="Europe/Berlin", now=now
            )
        ).conversation_id
        for n in range(PEOPLE)
    ]
    rows = []
    for n in range(count):
        due = now + timedelta(minutes=10 + n * 525_600 // max(count, 1))
        local = due.strftime("%Y-%m-%dT%H:%M:%S")
        rows.append(
            {
                "conversation_id": owners[n % PEOPLE],
                "kind": ScheduleKind.REMINDER,
                "text": f"reminder number {n}",
                "starts_local": local,
                "zone": "UTC",
                "repeat": "FREQ=WEEKLY" if n % 3 == 0 else None,
                "channel": None,
                "created_by": "the person",
                "created_at": now,
                "state": ScheduleState.ACTIVE,
                "next_local": local,
                "next_due_at": due,
            }
        )
    async with services.engine.begin() as connection:
        for start in range(0, len(rows), 5000):
            await connection.execute(insert(Schedule), rows[start : start + 5000])


async def sweep_plan(services: Services, now: datetime) -> list[str]:
    """How SQLite answers the sweep's question (what is due by now)."""
    compiled = due_query(now, BATCH).compile(
        services.engine, compile_kwargs={"literal_binds": True}
    )
    async with services.engine.connect() as connection:
        rows = await connection.execute(text(f"EXPLAIN QUERY PLAN {compiled}"))
        return [str(row[-1]) for row in rows]


async def timed_sweeps(services: Services, count: int) -> list[float]:
    spent = []
    for _ in range(count):
        cpu = time.process_time()
        fired = await services.firings.sweep()
        spent.append(time.process_time() - cpu)
        assert fired == 0, "nothing is due"
    return spent


async def run(options: Options) -> dict[str, Any]:
    async with (
        scratch_dir("parley-reminders-base-") as base_dir,
        scratch_dir("parley-reminders-load-") as load_dir,
    ):
        now = datetime.now(UTC)
        built = []
        for directory, schedules in ((base_dir, 0), (load_dir, options.schedules)):
            settings = Settings(
                _env_file=None, data_dir=directory, database_url=sqlite_url(directory / "p.db")
            )
            services = Services.build(settings, llm=ZeroLatencyLLM())
            await migrate(services.engine)
            if schedules:
                await fill(services, schedules, now)
            built.append((services, Subject(_label(schedules), await seed(services, 10, now))))
        for index in range(options.warmup + options.turns):
            at = now + timedelta(seconds=index)
            for services, subject in built if index % 2 else reversed(built):
                await turn(services, subject, at, record=index >= options.warmup)
        sweeps = {}
        for _ in range(2):  # alternated, the first round a warm-up
            for services, subject in built:
                sweeps[subject.label] = await timed_sweeps(services, options.turns)
        plan = await sweep_plan(built[1][0], now)
        for services, _ in built:
            await services.runner.close(5.0)
            await services.engine.dispose()
    base, load = (subject for _, subject in built)
    result: dict[str, Any] = {
        "machine": machine(),
        "schedules": options.schedules,
        "turns": options.turns,
        "turn_cpu": {s.label: figures(s.cpu) for s in (base, load)},
        "turn_wall": {s.label: figures(s.wall) for s in (base, load)},
        "sweep_cpu": {label: figures(values) for label, values in sweeps.items()},
        "sweep_plan": plan,
    }
    for kind in ("turn_cpu", "turn_wall", "sweep_cpu"):
        ratio = result[kind][load.label]["median_ms"] / result[kind][base.label]["median_ms"]
        result[f"{kind}_ratio"] = round(ratio, 3)
    result["goal"] = GOAL
    result["meets_goal"] = result["turn_cpu_ratio"] <= GOAL and any(
        "ix_schedules_next_due_at" in step for step in plan
    )
    return result


def _label(schedules: int) -> str:
    return f"{schedules} schedules"


def render(result: dict[str, Any]) -> str:
    lines = [machine_line(result["machine"]), f"{result['turns']} measured turns and sweeps each"]
    for kind in ("turn_cpu", "turn_wall", "sweep_cpu"):
        for label, f in result[kind].items():
            lines.append(
                f"{kind:9} {label:>17}: median {f['median_ms']:.3f} ms, p90 {f['p90_ms']:.3f} ms"
            )
        lines.append(f"{kind:9} ratio: x{result[f'{kind}_ratio']:.3f}")
    lines.append("sweep plan: " + " / ".join(result["sweep_plan"]))
    lines.append(
        f"goal: a turn x<= {result['goal']} and an indexed sweep: "
        f"{'met' if result['meets_goal'] else 'NOT met'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    log_to_devnull()
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
