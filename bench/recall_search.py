"""How long archive_search takes on a long conversation, against the REST search.

    python -m bench.recall_search [--messages N] [--chunks C] [--repetitions R]
                                  [--warmup W] [--postgres-url URL] [--json]

One person's conversation of `--messages` (default 20,000) messages, every one archived
in `--chunks` (default 100) level-0 chunks with their verbatim transcripts, is written
in bulk into a temporary SQLite file and, with `--postgres-url` (a scratch database: the
bench migrates it, and deletes its rows at the end), into Postgres. The messages are
small talk from a closed vocabulary in which a few words are very common: "the" is in
about nineteen messages of twenty, as in any English chat (the 'simple' configuration
keeps stop-words). Four questions are asked of each database, the way a model asks
them:

- **all words**: two mid-frequency words (each in about one message of a hundred), said
  together in 12 messages;
- **rare word**: a word said in 2 messages;
- **common-word fallback**: "the" and a word never said; no message has both, so
  archive_search falls back to any word, and "the" matches nearly every message;
- **common word alone**: "the", which every search must take as asked.

Each is timed as the tool runs it (`Recall.search`, the whole answer: the ranked search
of each kind, the any-word fallback where it comes to that, the snippets and the
messages' placing) and, as the baseline, as the REST API searches the same words
(`Search.search`, its default page of 20 newest hits plus one). The two alternate
within a repetition, so drift on a shared machine hits both alike; the figure that
counts is archive_search / REST at p50 of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.memory_support import (
    Person,
    backend,
    insert_person,
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
from memory.recall import Recall, Scope
from memory.storage.models import (
    Chunk,
    ChunkStatus,
    Conversation,
    Delivery,
    Message,
    Role,
    User,
)
from memory.storage.search import Search

SEED = 11
WORDS_PER_MESSAGE = 18
# The vocabulary: a few words nearly every message has, then words ever rarer (Zipf).
COMMON = ("the", "and", "to", "a", "i")
VOCABULARY = tuple(f"{stem}{n}" for n in range(400) for stem in ("lisbon", "train", "note"))
PAIR = ("harbourlight", "ticketstub")  # each in about 1 % of messages
TOGETHER = 12  # messages with both words of PAIR
RARE = "qxquietword"
RARE_COUNT = 2
NEVER = "qxneversaid"
QUERIES = {
    "all words": " ".join(PAIR),
    "rare word": RARE,
    "common-word fallback": f"the {NEVER}",
    "common word alone": "the",
}
REST_PAGE = 21  # the REST API's default page of 20, and one more to know there is a next
MESSAGE_GAP = timedelta(minutes=3)
BATCH = 5_000


@dataclass(frozen=True, slots=True)
class Options:
    messages: int
    chunks: int
    repetitions: int
    warmup: int
    postgres_url: str | None
    as_json: bool


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.recall_search",
        description="archive_search against the REST search, on a long conversation.",
    )
    parser.add_argument("--messages", type=int, default=20_000, help="messages (20,000)")
    parser.add_argument("--chunks", type=int, default=100, help="level-0 chunks (100)")
    parser.add_argument("--repetitions", type=int, default=20, help="measured per query (20)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured per query (3)")
    parser.add_argument(
        "--postgres-url", help="a scratch Postgres database, also measured (default: SQLite only)"
    )
    parser.add_argument("--json", dest="as_json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if args.chunks < 1 or args.messages < 2 * args.chunks or args.messages % args.chunks:
        parser.error("--messages must be a multiple of --chunks, two messages a chunk or more")
    return Options(
        args.messages,
        args.chunks,
        args.repetitions,
        args.warmup,
        args.postgres_url,
        args.as_json,
    )


# -- the conversation -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Seeded:
    user_id: uuid.UUID
    conversation_id: uuid.UUID
    load_seconds: float


def texts(count: int) -> list[str]:
    """The messages' words, seeded: small talk with the planted words where they go."""
    rng = random.Random(SEED)
    weights = [1 / (rank + 1) for rank in range(len(VOCABULARY))]
    out = []
    for _ in range(count):
        words = rng.choices(VOCABULARY, weights, k=WORDS_PER_MESSAGE)
        words += [word for word in COMMON if rng.random() < 0.95]
        words += [word for word in PAIR if rng.random() < 0.01]
        rng.shuffle(words)
        out.append(" ".join(words))
    # Planted apart from each other and from the messages that had a PAIR word by chance.
    spots = rng.sample(range(count), TOGETHER + RARE_COUNT)
    for index in spots[:TOGETHER]:
        out[index] = f"{out[index]} {PAIR[0]} by the {PAIR[1]}"
    for index in spots[TOGETHER:]:
        out[index] = f"{out[index]} {RARE}"
    return out


async def seed(engine: AsyncEngine, options: Options, now: datetime) -> Seeded:
    """One person's conversation: every message archived, in `options.chunks` chunks."""
    started = time.perf_counter()
    user_id, identity_id, conversation_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    total, per_chunk = options.messages, options.messages // options.chunks
    words = texts(total)

    def sent(seq: int) -> datetime:
        return now - (total - seq + 1) * MESSAGE_GAP

    async with engine.begin() as conn:
        await insert_person(
            conn,
            Person(user_id, identity_id, conversation_id),
            timezone="UTC",
            since=sent(1),
            last_at=sent(total),
            last_seq=total,
            last_user_seq=total - 1,
            answered_seq=total - 1,
        )
        ids = []
        for number in range(options.chunks):
            first, last = number * per_chunk + 1, (number + 1) * per_chunk
            blocks = [
                f"[{sent(seq):%Y-%m-%d %H:%M} · webchat · "
                f"{'user Ana' if seq % 2 else 'assistant'}]\n{words[seq - 1]}"
                for seq in range(first, last + 1)
            ]
            ids.append(
                await conn.scalar(
                    insert(Chunk)
                    .values(
                        conversation_id=conversation_id,
                        level=0,
                        seq_start=first,
                        seq_end=last,
                        time_start=sent(first),
                        time_end=sent(last),
                        transcript="\n\n".join(blocks) + "\n",
                        summary=f"What was said in messages {first}-{last}.",
                        status=ChunkStatus.READY,
                        attempts=1,
                        in_timeline=True,
                        user_notified=False,
                        facts_extracted=True,
                        created_at=sent(last),
                        updated_at=sent(last),
                    )
                    .returning(Chunk.id)
                )
            )

    def message_row(seq: int) -> dict[str, Any]:
        user = seq % 2 == 1
        return {
            "conversation_id": conversation_id,
            "seq": seq,
            "role": Role.USER if user else Role.ASSISTANT,
            "channel": "webchat",
            "identity_id": identity_id if user else None,
            "author_name": "Ana" if user else "",
            "source": None,
            "text": words[seq - 1],
            "created_at": sent(seq),
            "token_count": 40,
            "chunk_id": ids[(seq - 1) // per_chunk],
            "reply_to_seq": None if user else seq - 1,
            "delivery": None if user else Delivery.SENT,
            "delivery_attempts": 0 if user else 1,
            "delivery_parts_sent": 0 if user else 1,
        }

    for start in range(1, total + 1, BATCH):
        async with engine.begin() as conn:
            rows = [message_row(seq) for seq in range(start, min(total, start + BATCH - 1) + 1)]
            await conn.execute(insert(Message), rows)
    async with engine.begin() as conn:
        # What autovacuum (Postgres) or `PRAGMA optimize` would leave: statistics.
        await conn.execute(text("ANALYZE"))
    return Seeded(user_id, conversation_id, time.perf_counter() - started)


async def clean_up(engine: AsyncEngine, seeded: Seeded) -> None:
    async with engine.begin() as conn:
        cid = seeded.conversation_id
        await conn.execute(delete(Message).where(Message.conversation_id == cid))
        await conn.execute(delete(Chunk).where(Chunk.conversation_id == cid))
        await conn.execute(delete(Conversation).where(Conversation.id == cid))
        await conn.execute(delete(User).where(User.id == seeded.user_id))


# -- measuring ------------------------------------------------------------------------


@dataclass
class Subject:
    database: str
    engine: AsyncEngine
    seeded: Seeded
    recall: Recall
    search: Search

    @property
    def scope(self) -> Scope:
        return Scope(self.seeded.conversation_id, self.seeded.user_id, "UTC")


def subject(database: str, engine: AsyncEngine, seeded: Seeded, scratch: Path) -> Subject:
    # Recall as the gateway builds it (`gateway.services`), on the bench's seeded engine.
    settings = Settings(_env_file=None, data_dir=scratch / "data")
    stores = stores_on(engine, settings, SystemClock())
    recall = Recall(stores.archive, stores.repos.search, stores.profiles)
    return Subject(database, engine, seeded, recall, stores.repos.search)


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(percentile(ordered, 90), 3),
        "max_ms": round(ordered[-1], 3),
    }


async def measure(s: Subject, options: Options) -> dict[str, Any]:
    cid = s.seeded.conversation_id
    figures: dict[str, Any] = {}
    for name, query in QUERIES.items():
        answer = await s.recall.search(s.scope, query)
        rest_hits = await s.search.search(cid, query, limit=REST_PAGE)
        ways: dict[str, Callable[[], Awaitable[object]]] = {
            "archive_search": partial(s.recall.search, s.scope, query),
            "rest_search": partial(s.search.search, cid, query, limit=REST_PAGE),
        }
        samples: dict[str, list[float]] = {way: [] for way in ways}
        for index in range(options.warmup + options.repetitions):
            order = list(ways) if index % 2 else list(reversed(ways))
            for way in order:
                elapsed = await timed(ways[way])
                if index >= options.warmup:
                    samples[way].append(elapsed)
        timings = {way: stats(values) for way, values in samples.items()}
        figures[name] = {
            "query": query,
            "answer_first_line": answer.splitlines()[1],
            "answer_hits": sum(line.startswith("- ") for line in answer.splitlines()),
            "rest_hits": len(rest_hits),
            "timings": timings,
            "ratio_p50": round(
                timings["archive_search"]["p50_ms"] / timings["rest_search"]["p50_ms"], 2
            ),
        }
    return figures


@contextlib.asynccontextmanager
async def subjects(options: Options, now: datetime) -> AsyncIterator[list[Subject]]:
    async with scratch_dir("parley-bench-recall-search-") as scratch:
        made: list[Subject] = []
        try:
            urls = [sqlite_url(scratch / "recall.db")]
            if options.postgres_url:
                urls.append(normalise_url(options.postgres_url))
            for url in urls:
                engine = await migrated_engine(url)
                seeded = await seed(engine, options, now)
                made.append(subject(backend(url), engine, seeded, scratch))
            yield made
        finally:
            for s in made:
                if s.database != "sqlite":
                    await clean_up(s.engine, s.seeded)
                await s.engine.dispose()


async def run(options: Options, command: str = "") -> dict[str, Any]:
    now = datetime.now(UTC)
    async with subjects(options, now) as made:
        results = {
            s.database: {
                "load_seconds": round(s.seeded.load_seconds, 1),
                "queries": await measure(s, options),
            }
            for s in made
        }
    return {
        "machine": machine(),
        "command": command,
        "messages": options.messages,
        "chunks": options.chunks,
        "repetitions": options.repetitions,
        "warmup": options.warmup,
        "databases": results,
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"Parley archive_search vs REST search: {machine_line(result['machine'])}",
        f"command: {result['command']}",
        f"{result['messages']:,} messages in {result['chunks']} level-0 chunks with "
        f"transcripts; {result['repetitions']} measured per query after "
        f"{result['warmup']} warm-up, the two alternating",
        "",
        f"{'database':<12}{'query':<24}{'REST p50':>10}{'p90':>9}{'archive p50':>13}"
        f"{'p90':>9}{'ratio':>8}  answer",
    ]
    for database, figures in result["databases"].items():
        for name, q in figures["queries"].items():
            rest, archive = q["timings"]["rest_search"], q["timings"]["archive_search"]
            lines.append(
                f"{database:<12}{name:<24}{rest['p50_ms']:>10.2f}{rest['p90_ms']:>9.2f}"
                f"{archive['p50_ms']:>13.2f}{archive['p90_ms']:>9.2f}"
                f"{q['ratio_p50']:>7.1f}x  {q['answer_hits']} hits, REST {q['rest_hits']}"
            )
        lines.append(f"{'':<12}(loaded in {figures['load_seconds']} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    command = shlex.join(["python", "-m", "bench.recall_search", *(argv or sys.argv[1:])])
    result = asyncio.run(run(options, command))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
