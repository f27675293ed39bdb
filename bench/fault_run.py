"""The two-replica fault driver at bench scale: many more kills than CI runs.

    python -m bench.fault_run [--seed N] [--scale K] [--json]

The same rig as `tests/test_faults.py` (a private Postgres database and Redis, two
`parley serve` replicas behind the traffic's "load balancer", two `parley worker`
processes, fake Telegram and model servers), with the traffic and the kills multiplied
by K (default 5: 110 kills of each replica and 80 of the workers). Prints the
run, then what went wrong by kind (nothing, if the run holds); exits 1 if anything did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from tests.support.databases import postgres_database
from tests.support.faults.plan import FaultPlan
from tests.support.faults.report import Report
from tests.support.faults.rig import fault_rig

SETTLE_SECONDS = 180.0


def scaled(plan: FaultPlan, scale: int) -> FaultPlan:
    """More people talking for longer, killed proportionally more often. Messages come
    half as fast as in CI: a kill and restart takes about 3 s, and each replica's kills
    must fit inside the traffic."""
    low, high = plan.message_gap
    return replace(
        plan,
        message_gap=(low * 2, high * 2),
        telegram_users=plan.telegram_users * 2,
        messages_per_telegram_user=plan.messages_per_telegram_user * scale // 2,
        webchat_visitors=plan.webchat_visitors * 2,
        messages_per_visitor=plan.messages_per_visitor * scale // 2,
        serve_kills=plan.serve_kills * scale,
        worker_kills=plan.worker_kills * scale,
        drive_seconds=plan.drive_seconds * scale * 2,
        ack_seconds=plan.ack_seconds * 2,
    )


async def run(database_url: str, directory: Path, plan: FaultPlan) -> Report:
    async with fault_rig(database_url, directory, plan) as rig:
        await rig.drive()
        await rig.settle(seconds=SETTLE_SECONDS)
        report = await rig.report()
        if report.problems():
            print(rig.logs())
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fault_run", description=__doc__)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--scale", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args(argv)
    base = FaultPlan(seed=args.seed, replicas=2, serve_kills=44, worker_kills=16)
    plan = scaled(base, args.scale)
    databases = postgres_database()
    database_url = next(databases)
    try:
        with tempfile.TemporaryDirectory(prefix="parley-faults-") as directory:
            report = asyncio.run(run(database_url, Path(directory), plan))
    finally:
        databases.close()
    print(report.render())
    problems = report.problems()
    for name, items in problems.items():
        print(f"PROBLEM {name} ({len(items)}): {items[:10]}")
    if args.json:
        kills = {t: len(report.kills_of(t)) for t in ("serve0", "serve1", "worker", "redis")}
        figures = {
            "seed": plan.seed,
            "messages": len(report.sent),
            "kills": kills,
            "kills_during_a_model_call": sum(k.landed for k in report.kills),
            "seconds": report.seconds,
            "duplicate_sends": sum(report.sends.duplicates.values()),
            "uncertain_sends": report.uncertain_sends.total(),
            "problems": {name: len(items) for name, items in problems.items()},
        }
        print(json.dumps(figures, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
