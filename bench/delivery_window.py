"""How long a sent reply part stays in doubt: the time from the platform taking a part
to `Deliveries.part_sent` committing it, against a bare round trip (`SELECT 1`) on the
same engine in the same run.

    .venv/bin/python -m bench.delivery_window [--url postgresql://...] [-n 500]

A crash inside that window leaves the part uncertain (resent or skipped by
PARLEY_DELIVERY_UNCERTAIN); nothing else happens between the platform's answer and the
commit, so this figure is the window.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from bench.memory_support import (
    backend,
    machine,
    machine_line,
    migrated_engine,
    normalise_url,
    percentile,
    scratch_dir,
    sqlite_url,
)
from gateway.clock import SystemClock
from gateway.settings import Settings
from gateway.wiring import stores_on
from memory.storage.deliveries import Deliveries
from memory.storage.engine import session_factory
from memory.storage.messages import NewMessage
from memory.storage.models import Delivery, Role


async def measure(url: str, count: int, scratch: Path) -> dict[str, float]:
    engine = await migrated_engine(url)
    sessions = session_factory(engine)
    now = datetime.now(UTC)
    try:
        settings = Settings(_env_file=None, database_url=url, data_dir=scratch / "data")
        repos = stores_on(engine, settings, SystemClock()).repos
        ref = await repos.identities.resolve_identity(
            "telegram", f"bench-{time.time_ns()}", display_name="", timezone="UTC", now=now
        )
        deliveries = Deliveries(sessions)
        window, baseline = [], []
        for _ in range(count):
            reply, _ = await repos.messages.add_message(
                ref.conversation_id,
                NewMessage(Role.ASSISTANT, "telegram", "part", delivery=Delivery.PENDING),
                now=now,
            )
            await deliveries.sending(reply.id, 0)
            started = time.perf_counter()
            await deliveries.part_sent(reply.id, 0, "telegram", f"{reply.id}:1", now=now)
            window.append(time.perf_counter() - started)
            started = time.perf_counter()
            async with sessions() as session:
                await session.execute(text("SELECT 1"))
            baseline.append(time.perf_counter() - started)
    finally:
        await engine.dispose()
    window.sort()
    baseline.sort()
    return {
        "window_p50_ms": percentile(window, 50) * 1000,
        "window_p99_ms": percentile(window, 99) * 1000,
        "baseline_p50_ms": percentile(baseline, 50) * 1000,
        "ratio_p50": percentile(window, 50) / percentile(baseline, 50),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="database URL (default: a scratch SQLite file)")
    parser.add_argument("-n", type=int, default=500, help="parts to record")
    options = parser.parse_args()
    print(machine_line(machine()))
    async with scratch_dir("parley-delivery-window") as scratch:
        url = normalise_url(options.url) if options.url else sqlite_url(scratch / "bench.db")
        result = await measure(url, options.n, scratch)
    print(
        f"{backend(url)}: window p50 {result['window_p50_ms']:.2f} ms, "
        f"p99 {result['window_p99_ms']:.2f} ms; SELECT 1 p50 "
        f"{result['baseline_p50_ms']:.2f} ms; ratio {result['ratio_p50']:.1f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
