"""Summarisation throughput per worker with a model that answers instantly.

    python -m bench.summarize_throughput [--chunks N] [--conversations C] [--rounds R]
                                         [--database-url URL] [--json]

The model is an in-process `TextModel` (memory.summarize) that returns a fixed
~6,000-character summary at once, behind the same `ModelSummarizer` the gateway uses, so
what is measured is the job's own overhead: claim the chunk's lease (and read its
transcript), start and stop the lease renewer, call the summariser, store the summary,
queue the follow-ups (a roll-up of the conversation, a profile extraction).

N pending level-0 chunks (default 500, ~10,000-token transcripts, spread over C
conversations) are summarised three ways, in rotating order, every round:

- baseline: `Archive.record_summary` alone, one chunk after another: the one UPDATE and
  commit a summary costs at the least;
- direct:   `ArchiveJobs.summarize(chunk_id)`, one after another; follow-ups are counted,
  not run;
- embedded: every chunk queued on `gateway.jobs.queue.EmbeddedQueue` (concurrency 2, as
  `parley serve` runs it), which also runs the roll-up jobs the summaries queue (here
  they find nothing to roll: no chunk was swapped into the timeline). Extraction jobs
  are counted, not run: they are the profile's work, not the summariser's.

Between runs the chunks are reset to pending. Figures are the median over the rounds;
the ratios to the baseline are what compare across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.memory_support import (
    backend,
    filler,
    log_to_devnull,
    machine,
    machine_line,
    migrated_engine,
    normalise_url,
    scratch_dir,
    sqlite_url,
)
from gateway.clock import SystemClock
from gateway.jobs.memory_jobs import build_archive_jobs
from gateway.jobs.queue import EmbeddedQueue
from gateway.settings import Settings
from gateway.wiring import stores_on
from memory.archive.archive import Archive
from memory.archive.upkeep import (
    EXTRACT,
    ROLLUP,
    SUMMARIZE,
    ArchiveJobs,
    summarize_key,
)
from memory.storage.messages import Messages
from memory.storage.models import Chunk, ChunkStatus, Conversation, ConversationKind, User

SUMMARY = filler(6_000, "Summary:")
MESSAGES_PER_CHUNK = 20
MODES = ("baseline", "direct", "embedded")
BATCH = 100


@dataclass(frozen=True, slots=True)
class Options:
    chunks: int
    conversations: int
    transcript_tokens: int
    rounds: int
    concurrency: int
    database_url: str | None
    as_json: bool


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.summarize_throughput",
        description="Chunks summarised per second by one worker, model latency zero.",
    )
    parser.add_argument("--chunks", type=int, default=500, help="pending chunks (500)")
    parser.add_argument("--conversations", type=int, default=50, help="spread over (50)")
    parser.add_argument("--transcript-tokens", type=int, default=10_000, help="per chunk (10,000)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode (3)")
    parser.add_argument("--concurrency", type=int, default=2, help="EmbeddedQueue concurrency (2)")
    parser.add_argument(
        "--database-url",
        help="a scratch Postgres database (default: a temporary SQLite file); the "
        "benchmark's rows are deleted at the end",
    )
    parser.add_argument("--json", dest="as_json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if args.chunks < 1 or args.conversations < 1 or args.rounds < 1:
        parser.error("--chunks, --conversations and --rounds must be positive")
    return Options(
        chunks=args.chunks,
        conversations=min(args.conversations, args.chunks),
        transcript_tokens=args.transcript_tokens,
        rounds=args.rounds,
        concurrency=args.concurrency,
        database_url=args.database_url,
        as_json=args.as_json,
    )


class InstantModel:
    """A `TextModel` that answers every prompt at once with the same summary."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        self.calls += 1
        return SUMMARY


class CountingEnqueue:
    def __init__(self) -> None:
        self.jobs: Counter[str] = Counter()

    async def __call__(self, job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
        self.jobs[job] += 1


@dataclass(frozen=True, slots=True)
class Seeded:
    user_ids: tuple[uuid.UUID, ...]
    chunk_ids: tuple[int, ...]


def transcript(tokens: int, start: datetime) -> str:
    per_message = tokens * 4 // MESSAGES_PER_CHUNK
    blocks = []
    for n in range(MESSAGES_PER_CHUNK):
        who = "assistant" if n % 2 else "user Ana"
        header = f"[{start + timedelta(minutes=5 * n):%Y-%m-%d %H:%M} · webchat · {who}]\n"
        blocks.append(header + filler(per_message - len(header)))
    return "\n\n".join(blocks) + "\n"


async def seed(engine: AsyncEngine, options: Options, now: datetime) -> Seeded:
    users = [uuid.uuid4() for _ in range(options.conversations)]
    conversations = [uuid.uuid4() for _ in users]
    per_conversation = -(-options.chunks // options.conversations)
    start = now - timedelta(days=30)
    text = transcript(options.transcript_tokens, start)
    async with engine.begin() as conn:
        await conn.execute(
            insert(User),
            [
                {"id": u, "display_name": "Ana", "timezone": "UTC", "created_at": start}
                for u in users
            ],
        )
        await conn.execute(
            insert(Conversation),
            [
                {
                    "id": c,
                    "kind": ConversationKind.PERSONAL,
                    "user_id": u,
                    "title": "Ana",
                    "created_at": start,
                    "last_seq": per_conversation * MESSAGES_PER_CHUNK + 50,
                    "last_user_seq": per_conversation * MESSAGES_PER_CHUNK + 49,
                    "answered_seq": per_conversation * MESSAGES_PER_CHUNK + 49,
                }
                for u, c in zip(users, conversations, strict=True)
            ],
        )
    rows = []
    for index in range(options.chunks):
        conversation = conversations[index % options.conversations]
        nth = index // options.conversations
        first = nth * MESSAGES_PER_CHUNK + 1
        rows.append(
            {
                "conversation_id": conversation,
                "level": 0,
                "seq_start": first,
                "seq_end": first + MESSAGES_PER_CHUNK - 1,
                "time_start": start,
                "time_end": start + timedelta(minutes=5 * MESSAGES_PER_CHUNK),
                "transcript": text,
                "status": ChunkStatus.PENDING,
                "attempts": 0,
                "created_at": now,
                "updated_at": now,
            }
        )
    for first in range(0, len(rows), BATCH):
        async with engine.begin() as conn:
            await conn.execute(insert(Chunk), rows[first : first + BATCH])
    async with engine.connect() as conn:
        ids = await conn.scalars(
            select(Chunk.id).where(Chunk.conversation_id.in_(conversations)).order_by(Chunk.id)
        )
        chunk_ids = tuple(ids)
    return Seeded(tuple(users), chunk_ids)


async def reset(engine: AsyncEngine, seeded: Seeded) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(Chunk)
            .where(Chunk.id.in_(seeded.chunk_ids))
            .values(
                status=ChunkStatus.PENDING,
                summary=None,
                attempts=0,
                lease_until=None,
                next_attempt_at=None,
                last_error=None,
            )
        )
    if engine.dialect.name == "sqlite":
        async with engine.begin() as conn:
            await conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


async def check_done(engine: AsyncEngine, seeded: Seeded) -> None:
    async with engine.connect() as conn:
        done = await conn.scalar(
            select(func.count()).where(
                Chunk.id.in_(seeded.chunk_ids),
                Chunk.status == ChunkStatus.READY,
                Chunk.summary == SUMMARY,
            )
        )
    if done != len(seeded.chunk_ids):
        raise RuntimeError(f"only {done} of {len(seeded.chunk_ids)} chunks were summarised")


@dataclass
class Bench:
    engine: AsyncEngine
    archive: Archive
    messages: Messages
    settings: Settings
    seeded: Seeded
    concurrency: int

    def jobs(self, enqueue: Any, model: InstantModel) -> ArchiveJobs:
        """`ArchiveJobs` as the gateway and a worker build them, with our model."""
        return build_archive_jobs(
            self.settings,
            archive=self.archive,
            messages=self.messages,
            model=model,
            enqueue=enqueue,
            clock=SystemClock(),
        )

    async def baseline(self) -> dict[str, Any]:
        for chunk_id in self.seeded.chunk_ids:
            # Seeded chunks were never claimed: attempt 0 is theirs.
            await self.archive.record_summary(chunk_id, SUMMARY, datetime.now(UTC), attempt=0)
        return {}

    async def direct(self) -> dict[str, Any]:
        enqueue, model = CountingEnqueue(), InstantModel()
        jobs = self.jobs(enqueue, model)
        for chunk_id in self.seeded.chunk_ids:
            await jobs.summarize(chunk_id)
        return {"model_calls": model.calls, "follow_ups_queued": dict(enqueue.jobs)}

    async def embedded(self) -> dict[str, Any]:
        queue = EmbeddedQueue(concurrency=self.concurrency, sweep_every=3_600)
        model, ran = InstantModel(), Counter[str]()
        jobs = self.jobs(queue.enqueue, model)

        class Summariser:
            async def run(self, job: str, arg: str) -> None:
                ran[job] += 1
                if job == SUMMARIZE:
                    await jobs.summarize(int(arg))
                elif job == ROLLUP:
                    await jobs.rollup(uuid.UUID(arg))
                # EXTRACT is the profile's job, not the summariser's: counted only.

            async def sweep(self) -> int:
                return 0  # every chunk is queued up front

        await queue.start(Summariser())
        try:
            for chunk_id in self.seeded.chunk_ids:
                await queue.enqueue(SUMMARIZE, str(chunk_id), key=summarize_key(chunk_id, 0))
            await queue.idle()
        finally:
            await queue.close()
        return {"model_calls": model.calls, "jobs_run_or_counted": dict(ran)}


async def timed(
    bench: Bench, name: str, call: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    await reset(bench.engine, bench.seeded)
    wall, cpu = time.perf_counter(), time.process_time()
    notes = await call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await check_done(bench.engine, bench.seeded)
    count = len(bench.seeded.chunk_ids)
    return {
        "mode": name,
        "seconds": round(wall, 3),
        "chunks_per_second": round(count / wall, 1),
        "ms_per_chunk": round(wall / count * 1000, 3),
        # This process's CPU (all threads, the SQLite driver's included) per chunk.
        "cpu_ms_per_chunk": round(cpu / count * 1000, 3),
    } | notes


async def run(options: Options) -> dict[str, Any]:
    async with scratch_dir("parley-bench-summarize-") as scratch:
        url = normalise_url(options.database_url or sqlite_url(scratch / "parley.db"))
        settings = Settings(_env_file=None, database_url=url, data_dir=scratch / "data")
        engine = await migrated_engine(url)
        seeded = Seeded((), ())
        try:
            seeded = await seed(engine, options, datetime.now(UTC))
            stores = stores_on(engine, settings, SystemClock())
            bench = Bench(
                engine,
                stores.archive,
                stores.repos.messages,
                settings,
                seeded,
                options.concurrency,
            )
            calls = {"baseline": bench.baseline, "direct": bench.direct, "embedded": bench.embedded}
            # One unmeasured pass of each warms the caches and the code paths.
            for name in MODES:
                await timed(bench, name, calls[name])
            rounds: list[dict[str, Any]] = []
            for index in range(options.rounds):
                order = MODES[index % 3 :] + MODES[: index % 3]
                for name in order:
                    rounds.append(await timed(bench, name, calls[name]))
        finally:
            if options.database_url:
                async with engine.begin() as conn:
                    await conn.execute(delete(Chunk).where(Chunk.id.in_(seeded.chunk_ids)))
                    await conn.execute(delete(User).where(User.id.in_(seeded.user_ids)))
            await engine.dispose()
    return report(options, url, rounds)


def report(options: Options, url: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for name in MODES:
        runs = [r for r in rounds if r["mode"] == name]
        modes[name] = {
            key: round(statistics.median(r[key] for r in runs), 3)
            for key in ("seconds", "chunks_per_second", "ms_per_chunk", "cpu_ms_per_chunk")
        } | {"runs": runs}
    base = modes["baseline"]
    return {
        "machine": machine(),
        "database": backend(url),
        "chunks": options.chunks,
        "conversations": options.conversations,
        "transcript_tokens": options.transcript_tokens,
        "summary_chars": len(SUMMARY),
        "rounds": options.rounds,
        "concurrency": options.concurrency,
        "modes": modes,
        "ratio_to_baseline": {
            name: {
                "ms_per_chunk": round(modes[name]["ms_per_chunk"] / base["ms_per_chunk"], 2),
                "cpu_ms_per_chunk": round(
                    modes[name]["cpu_ms_per_chunk"] / base["cpu_ms_per_chunk"], 2
                ),
            }
            for name in ("direct", "embedded")
        },
        "rollup_and_extract_jobs": {ROLLUP: "run (no-op)", EXTRACT: "counted, not run"},
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"Parley summarisation throughput: {result['database']}, {machine_line(result['machine'])}",
        f"{result['chunks']} pending level-0 chunks over {result['conversations']} "
        f"conversations, ~{result['transcript_tokens']:,}-token transcripts, "
        f"{result['summary_chars']:,}-character summary from a zero-latency model; "
        f"median of {result['rounds']} rounds",
        "",
        f"{'mode':<10}{'chunks/s':>10}{'ms/chunk':>10}{'CPU ms/chunk':>14}{'x baseline':>12}",
    ]
    for name, mode in result["modes"].items():
        ratio = result["ratio_to_baseline"].get(name, {}).get("ms_per_chunk")
        lines.append(
            f"{name:<10}{mode['chunks_per_second']:>10.1f}{mode['ms_per_chunk']:>10.3f}"
            f"{mode['cpu_ms_per_chunk']:>14.3f}{'' if ratio is None else f'{ratio:.2f}':>12}"
        )
    direct = result["modes"]["direct"]["runs"][-1]
    embedded = result["modes"]["embedded"]["runs"][-1]
    lines += [
        "",
        f"direct: model calls {direct['model_calls']}, follow-ups queued "
        f"{direct['follow_ups_queued']}",
        f"embedded (concurrency {result['concurrency']}): model calls "
        f"{embedded['model_calls']}, jobs {embedded['jobs_run_or_counted']} "
        "(extract counted, not run)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    log_to_devnull()
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
