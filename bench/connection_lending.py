"""What lending a connection for one short read costs, two ways, alternated in one
process:

- "one greenlet" (as shipped since stop 46): `Deliveries.address` through
  `memory.storage.engine.read`, which lends the connection, reads and gives it back in
  one greenlet;
- "async connection" (before): the same SELECT on an `AsyncConnection` lent as the
  gateway lent them before stop 45 (`async with engine.connect()`, the reads on the
  event loop's thread on SQLite, in autocommit on Postgres): a greenlet for each of
  its three calls, and SQLAlchemy's exit, which closes in a task of its own shielded
  from cancellation.

    python -m bench.connection_lending [--reads N] [--blocks B] [--database-url URL] [--json]

One database (SQLite in a temporary directory unless `--database-url` names a
PostgreSQL one, brought to head, to which one person is added), the repositories as the
gateway opens them. A read is the chat address every answer looks up: one indexed
SELECT. The ways alternate in blocks of `--reads` reads (`--blocks` each), so drift on
a noisy machine hits both alike. The figure that counts is the ratio of the medians of
the blocks' CPU per read.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

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
from memory.storage.sqlite_trips import reads_inline
from memory.token_count import message_tokens

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WAYS = ("one greenlet", "async connection")


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


def reader(name: str, repos: Repositories, ref: Any, engine: AsyncEngine) -> Read:
    if name == "one greenlet":
        return lambda: repos.deliveries.address(ref.conversation_id, ref.identity_id)
    params = {"conversation_id": ref.conversation_id, "identity_id": ref.identity_id}

    async def lent() -> object:
        async with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                with reads_inline(connection):
                    return (await connection.execute(_ADDRESS, params)).one_or_none()
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            return (await connection.execute(_ADDRESS, params)).one_or_none()

    return lent


@contextlib.asynccontextmanager
async def world(
    database_url: str | None,
) -> AsyncIterator[tuple[Repositories, Any, str, AsyncEngine]]:
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
            yield repos, ref, backend(url), engine
        finally:
            await engine.dispose()


async def run(options: Options) -> dict[str, Any]:
    log_to_devnull()
    facts = machine()
    ways = {name: Way(name) for name in WAYS}
    async with world(options.database_url) as (repos, ref, database, engine):
        reads = {name: reader(name, repos, ref, engine) for name in WAYS}
        for name in WAYS:  # warm-up: connections opened, the statement compiled
            for _ in range(options.reads // 4):
                await reads[name]()
        for _ in range(options.blocks):
            for name in WAYS:
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
        "one_greenlet_over_async_connection_cpu": round(
            medians["one greenlet"] / medians["async connection"], 3
        ),
    }


def render(result: dict[str, Any]) -> str:
    lines = [machine_line(result["machine"])]
    lines.append(
        f"{result['database']}: {result['reads']} reads a block, {result['blocks']} blocks a way"
    )
    for name, cpu_us in result["median_cpu_us"].items():
        lines.append(f"{name:16} CPU {cpu_us:7.1f} µs a read (median of the blocks)")
    ratio = result["one_greenlet_over_async_connection_cpu"]
    lines.append(f"one greenlet/async connection CPU: ×{ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
