"""What lending a connection for one short read costs, three ways, alternated in one
process:

- "one greenlet" (as shipped since stop 46): `Deliveries.address` through
  `memory.storage.engine.read`, which on SQLite lends the connection, reads and returns
  it in one greenlet;
- "at once": the same SELECT on an `AsyncConnection` from `reading()`, closed at once
  where that waits for nothing (as shipped in stop 45): three greenlets a read;
- "shielded": that, closed SQLAlchemy's own way, in a task of its own shielded from
  cancellation (before stop 45): `_closes_at_once` patched to say no.

    python -m bench.connection_lending [--reads N] [--blocks B] [--database-url URL] [--json]

One database (SQLite in a temporary directory unless `--database-url` names a
PostgreSQL one, brought to head, to which one person is added), the repositories as the
gateway opens them. A read is the chat address every answer looks up: one indexed
SELECT. The ways alternate in blocks of `--reads` reads (`--blocks` each), so drift on
a noisy machine hits all alike. The figures that count are the ratios of the medians of
the blocks' CPU per read. On Postgres, `read` lends a `reading()` connection, so the
first two ways differ only by `run_sync`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import memory.storage.engine as storage_engine
from bench.memory_support import (
    backend,
    log_to_devnull,
    machine,
    machine_line,
    migrated_engine,
    normalise_url,
    scratch_dir,
    sqlite_url,
)
from memory.storage.deliveries import _ADDRESS
from memory.storage.engine import session_factory
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WAYS = ("one greenlet", "at once", "shielded")


@dataclass
class Options:
    reads: int
    blocks: int
    database_url: str | None
    as_json: bool


@dataclass
class Way:
    name: str
    cpu_us: list[float] = field(default_factory=list)  # per read, one entry a block


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.connection_lending", description=__doc__)
    parser.add_argument("--reads", type=int, default=3000, help="reads a block (default 3000)")
    parser.add_argument("--blocks", type=int, default=6, help="blocks a way (default 6)")
    parser.add_argument("--database-url", help="a PostgreSQL database to use instead")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    return Options(args.reads, args.blocks, args.database_url, args.json)


Read = Callable[[], Awaitable[object]]


def reader(name: str, repos: Repositories, ref: Any) -> Read:
    if name == "one greenlet":
        return lambda: repos.deliveries.address(ref.conversation_id, ref.identity_id)
    sessions = repos.deliveries._sessions  # the bench's own look inside
    params = {"conversation_id": ref.conversation_id, "identity_id": ref.identity_id}

    async def lent() -> object:
        async with storage_engine.reading(sessions) as connection:
            return (await connection.execute(_ADDRESS, params)).one_or_none()

    return lent


@contextlib.contextmanager
def way(name: str) -> Iterator[None]:
    if name != "shielded":
        yield
        return
    with mock.patch.object(storage_engine, "_closes_at_once", return_value=False):
        yield


@contextlib.asynccontextmanager
async def world(database_url: str | None) -> AsyncIterator[tuple[Repositories, Any, str]]:
    async with scratch_dir("parley-lending-") as scratch:
        url = normalise_url(database_url) if database_url else sqlite_url(scratch / "lend.db")
        engine = await migrated_engine(url)
        try:
            repos = Repositories.open(
                session_factory(engine), count_tokens=message_tokens, now=lambda: NOW
            )
            ref = await repos.identities.resolve_identity(
                "telegram", "4242", display_name="Ana", timezone="UTC", now=NOW
            )
            yield repos, ref, backend(url)
        finally:
            await engine.dispose()


async def run(options: Options) -> dict[str, Any]:
    log_to_devnull()
    facts = machine()
    ways = {name: Way(name) for name in WAYS}
    async with world(options.database_url) as (repos, ref, database):
        reads = {name: reader(name, repos, ref) for name in WAYS}
        for name in WAYS:  # warm-up: connections opened, the statement compiled
            with way(name):
                for _ in range(options.reads // 4):
                    await reads[name]()
        for _ in range(options.blocks):
            for name in WAYS:
                with way(name):
                    cpu = time.process_time()
                    for _ in range(options.reads):
                        await reads[name]()
                    ways[name].cpu_us.append((time.process_time() - cpu) / options.reads * 1e6)
    medians = {name: round(statistics.median(w.cpu_us), 1) for name, w in ways.items()}
    return {
        "command": "python -m bench.connection_lending",
        "machine": facts,
        "database": database,
        "reads": options.reads,
        "blocks": options.blocks,
        "blocks_per_way": {name: w.cpu_us for name, w in ways.items()},
        "median_cpu_us": medians,
        "one_greenlet_over_at_once_cpu": round(medians["one greenlet"] / medians["at once"], 3),
        "at_once_over_shielded_cpu": round(medians["at once"] / medians["shielded"], 3),
    }


def render(result: dict[str, Any]) -> str:
    lines = [machine_line(result["machine"])]
    lines.append(
        f"{result['database']}: {result['reads']} reads a block, {result['blocks']} blocks a way"
    )
    for name, cpu_us in result["median_cpu_us"].items():
        lines.append(f"{name:12} CPU {cpu_us:7.1f} µs a read (median of the blocks)")
    lines.append(f"one greenlet/at once CPU: ×{result['one_greenlet_over_at_once_cpu']}")
    lines.append(f"at once/shielded CPU: ×{result['at_once_over_shielded_cpu']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
