"""What storing a turn's reply costs this process on PostgreSQL: one statement, as
shipped (`memory.storage.messages._store_at_once`), against the transaction it replaced
(BEGIN, the lease's lock, the seq and insert, the usage charged, COMMIT: five round
trips).

    .venv/bin/python -m bench.reply_write [--url postgresql://...] [--replies N] [--blocks B]

One process, the repositories as the gateway opens them, one conversation and its
turn's lease held throughout. A reply here is what a turn stores at its end: the
assistant's message answering the last user message, under the lease, with one model
call's usage charged to the person's day. The two ways alternate in blocks of
`--replies` (`--blocks` each), so drift on a noisy machine hits both alike; "transaction"
blocks take the path every other message takes (as if the database were not
PostgreSQL), which on PostgreSQL is what a reply took before. Per reply: CPU of this
process (every thread) and wall time; the figure that counts is the ratio of the
medians of the blocks. The database server's own CPU is not counted (the turn benches
count the gateway's process only, too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

from bench.memory_support import machine, machine_line, migrated_engine, normalise_url
from gateway.clock import SystemClock
from gateway.settings import Settings
from gateway.wiring import stores_on
from memory.model_usage import Usage
from memory.storage import messages
from memory.storage.messages import NewMessage
from memory.storage.models import Delivery, Role
from memory.storage.usage_days import Payer

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
WAYS = ("one statement", "transaction")


@contextlib.contextmanager
def way(name: str) -> Iterator[None]:
    if name == "one statement":
        yield
        return
    with mock.patch.object(messages, "dialect_of", return_value="the transaction's path"):
        yield


async def run(url: str, replies: int, blocks: int, scratch: Path) -> dict[str, Any]:
    if not url.startswith("postgresql"):
        raise SystemExit("bench.reply_write measures PostgreSQL's path: give a postgresql URL")
    engine = await migrated_engine(url)
    now = datetime.now(UTC)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in WAYS}
    seqs: list[int] = []
    try:
        settings = Settings(_env_file=None, database_url=url, data_dir=scratch)
        repos = stores_on(engine, settings, SystemClock()).repos
        ref = await repos.identities.resolve_identity(
            "telegram", f"bench-{time.time_ns()}", display_name="", timezone="UTC", now=now
        )
        lease = f"bench-turn-{ref.conversation_id}"
        if not await repos.leases.claim(lease, timedelta(hours=1)):
            raise RuntimeError("could not take the bench's own lease")
        held = repos.leases.held(lease)
        payer = Payer(ref.user_id, False, "UTC")
        asked, _ = await repos.messages.add_message(
            ref.conversation_id, NewMessage(Role.USER, "telegram", "tell me"), now=now
        )
        reply = NewMessage(
            Role.ASSISTANT,
            "telegram",
            "Here is the answer, in a sentence or two of ordinary length.",
            reply_to_seq=asked.seq,
            delivery=Delivery.PENDING,
            model="bench",
            usage=(Usage(1200, 800, 60, "bench"),),
            payer=payer,
        )

        async def block(name: str) -> tuple[float, float]:
            with way(name):
                cpu, wall = time.process_time(), time.perf_counter()
                for _ in range(replies):
                    stored, _ = await repos.messages.add_message(
                        ref.conversation_id, reply, now=now, held=held
                    )
                    seqs.append(stored.seq)
                return (
                    (time.process_time() - cpu) / replies * 1000,
                    (time.perf_counter() - wall) / replies * 1000,
                )

        for name in WAYS:  # warm-up: statement caches, prepared statements
            await block(name)
        for _ in range(blocks):
            for name in WAYS:
                figures[name].append(await block(name))
        await repos.leases.release(lease)
    finally:
        await engine.dispose()
    medians: dict[str, dict[str, Any]] = {
        name: {
            "cpu_ms": round(statistics.median(cpu for cpu, _ in figures[name]), 4),
            "wall_ms": round(statistics.median(wall for _, wall in figures[name]), 4),
            "cpu_ms_blocks": [round(cpu, 4) for cpu, _ in figures[name]],
        }
        for name in WAYS
    }
    one, many = medians["one statement"], medians["transaction"]
    return {
        "machine": machine(),
        "replies_a_block": replies,
        "blocks": blocks,
        # Every reply stored, either way, each under the next seq.
        "reply_seqs_consecutive": seqs == list(range(seqs[0], seqs[0] + len(seqs))),
        "replies_stored": len(seqs),
        "ways": medians,
        "cpu_ratio": round(one["cpu_ms"] / many["cpu_ms"], 3),
        "wall_ratio": round(one["wall_ms"] / many["wall_ms"], 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="a PostgreSQL database URL")
    parser.add_argument("--replies", type=int, default=300, help="replies a block")
    parser.add_argument("--blocks", type=int, default=8, help="blocks a way")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parley-reply-") as scratch:
        result = await run(
            normalise_url(options.url), options.replies, options.blocks, Path(scratch)
        )
    if options.json:
        print(json.dumps(result, indent=2))
        return
    print(machine_line(result["machine"]))
    for name, figures in result["ways"].items():
        print(f"{name:>14}: {figures['cpu_ms']:.3f} ms CPU, {figures['wall_ms']:.3f} ms a reply")
    print(f"one statement / transaction: CPU x{result['cpu_ratio']}, wall x{result['wall_ratio']}")


if __name__ == "__main__":
    asyncio.run(main())
