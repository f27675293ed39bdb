"""What a platform turn's writes cost on SQLite: the statements of a short write
transaction after its first write on the event loop's thread (as shipped), against
every statement in the connection's own thread (as before stop 43).

    python -m bench.turn_writes [--turns N] [--blocks B] [--json]

One process, one SQLite database in a temporary directory (the gateway's engine
factory: WAL, the one-trip cursor), the repositories as the gateway opens them. A turn
here is the writes a Telegram turn makes through delivery, in its order: the person's
message stored (with its platform id), the reply stored (with its usage charged to the
person's day), the reply's part marked as being sent, then marked sent (with the
platform's id, the reply sent in the same transaction). Nothing else: no HTTP, no
model, no reads of the turn's context.

The two ways alternate in blocks of `--turns` turns (`--blocks` each), so drift on a
noisy machine hits both alike. "Thread" turns `memory.storage.engine.writes_inline`
off for its blocks: `write_transaction` then runs its block on the connection as is,
and every statement takes its trip, as before. Per turn: CPU of this process (all threads:
aiosqlite's too), wall time, and trips to aiosqlite's thread (counted by wrapping its
`Connection._execute`, which still does the work). The figure that counts is the
ratio of the medians of the blocks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import aiosqlite

import memory.storage.engine as storage_engine
from bench.memory_support import (
    log_to_devnull,
    machine,
    machine_line,
    migrated_engine,
    scratch_dir,
    sqlite_url,
)
from memory.model_usage import Usage
from memory.storage.engine import session_factory
from memory.storage.messages import NewMessage
from memory.storage.models import Delivery, Role
from memory.storage.repositories import Repositories
from memory.storage.usage_days import Payer
from memory.token_count import message_tokens

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WAYS = ("inline", "thread")


@dataclass
class Options:
    turns: int
    blocks: int
    as_json: bool


@dataclass
class Way:
    name: str
    cpu_us: list[float] = field(default_factory=list)  # per turn, one entry a block
    wall_us: list[float] = field(default_factory=list)
    trips: list[float] = field(default_factory=list)


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.turn_writes", description=__doc__)
    parser.add_argument("--turns", type=int, default=300, help="turns a block (default 300)")
    parser.add_argument("--blocks", type=int, default=8, help="blocks a way (default 8)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    return Options(args.turns, args.blocks, args.json)


class TripCounter:
    """Counts calls into aiosqlite's thread while installed."""

    def __init__(self) -> None:
        self.trips = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        real: Any = aiosqlite.Connection._execute  # untyped in the library

        async def counted(connection: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            self.trips += 1
            return await real(connection, fn, *args, **kwargs)

        with mock.patch.object(aiosqlite.Connection, "_execute", counted):
            yield


@contextlib.contextmanager
def way(name: str) -> Iterator[None]:
    """`thread`: short write transactions lent as they are, every statement a trip."""
    if name == "inline":
        yield
        return
    with mock.patch.object(storage_engine, "writes_inline", _as_is):
        yield


@contextlib.contextmanager
def _as_is(connection: Any) -> Iterator[None]:
    yield


async def one_turn(repos: Repositories, ref: Any, payer: Payer, number: int) -> None:
    """The writes of one Telegram turn through delivery."""
    await repos.messages.add_message(
        ref.conversation_id,
        NewMessage(
            Role.USER,
            "telegram",
            f"message {number}",
            identity_id=ref.identity_id,
            platform_message_id=f"m{number}",
        ),
        now=NOW,
    )
    reply, _ = await repos.messages.add_message(
        ref.conversation_id,
        NewMessage(
            Role.ASSISTANT,
            "telegram",
            f"reply {number}",
            reply_to_seq=2 * number + 1,
            delivery=Delivery.PENDING,
            usage=(Usage(prompt=900, cached=0, completion=12, model="bench"),),
            payer=payer,
        ),
        now=NOW,
    )
    await repos.deliveries.sending(reply.id, 0)
    await repos.deliveries.part_sent(reply.id, 0, "telegram", f"r{number}", now=NOW, last=True)


@contextlib.asynccontextmanager
async def world() -> AsyncIterator[tuple[Repositories, Any, Payer]]:
    async with scratch_dir("parley-writes-") as scratch:
        engine = await migrated_engine(sqlite_url(scratch / "writes.db"))
        try:
            repos = Repositories.open(
                session_factory(engine), count_tokens=message_tokens, now=lambda: NOW
            )
            ref = await repos.identities.resolve_identity(
                "telegram", "4242", display_name="Ana", timezone="UTC", now=NOW
            )
            yield repos, ref, Payer(ref.user_id, group=False, timezone="UTC")
        finally:
            await engine.dispose()


async def run(options: Options) -> dict[str, Any]:
    log_to_devnull()
    facts = machine()
    ways = {name: Way(name) for name in WAYS}
    counter = TripCounter()
    async with world() as (repos, ref, payer):
        number = 0
        for _ in range(2):  # warm-up: connections opened, statements compiled
            for name in WAYS:
                with way(name):
                    for _ in range(options.turns // 4):
                        await one_turn(repos, ref, payer, number)
                        number += 1
        with counter.installed():
            for _ in range(options.blocks):
                for name in WAYS:
                    with way(name):
                        trips, cpu, wall = counter.trips, time.process_time(), time.perf_counter()
                        for _ in range(options.turns):
                            await one_turn(repos, ref, payer, number)
                            number += 1
                        turns = options.turns
                        ways[name].cpu_us.append((time.process_time() - cpu) / turns * 1e6)
                        ways[name].wall_us.append((time.perf_counter() - wall) / turns * 1e6)
                        ways[name].trips.append((counter.trips - trips) / turns)
    medians = {
        name: {
            "cpu_us": round(statistics.median(w.cpu_us), 1),
            "wall_us": round(statistics.median(w.wall_us), 1),
            "trips": round(statistics.median(w.trips), 2),
        }
        for name, w in ways.items()
    }
    return {
        "command": "python -m bench.turn_writes",
        "machine": facts,
        "turns": options.turns,
        "blocks": options.blocks,
        "blocks_per_way": {name: vars(w) for name, w in ways.items()},
        "medians": medians,
        "inline_over_thread_cpu": round(
            medians["inline"]["cpu_us"] / medians["thread"]["cpu_us"], 3
        ),
    }


def render(result: dict[str, Any]) -> str:
    lines = [machine_line(result["machine"])]
    lines.append(f"{result['turns']} turns a block, {result['blocks']} blocks a way")
    for name, figures in result["medians"].items():
        lines.append(
            f"{name:7} CPU {figures['cpu_us']:8.1f} µs a turn's writes, wall "
            f"{figures['wall_us']:8.1f} µs, {figures['trips']:.2f} trips to the thread"
        )
    lines.append(f"inline/thread CPU: ×{result['inline_over_thread_cpu']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
