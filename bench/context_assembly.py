"""Context assembly against archive size: 1,000 vs 1,000,000 archived messages.

    python -m bench.context_assembly [--small N] [--large N] [--repetitions R]
                                     [--database-url URL] [--json]

"Context assembly" is everything a turn does before it calls the model:
`ArchiveMemory.before_turn` (swap + timeline + profile read), `Conversations.load_turn` (the
live window) and the rendering of the system prompt and the live turns with the same
functions `Answerer.answer` uses (checked once per run: the prompt built here is
compared with the one `Answerer.answer` hands to the model). Timed apart: the parts
of `before_turn`, `after_turn`, and `Conversations.owes_reply` (where the runner has it: the
small read a turn loop makes before each round after its first).

Each archive is written straight into the database with bulk inserts on the real tables,
in the shape the roll-up rules leave behind: level-0 chunks of 20 messages (ready, in
the timeline, ~6,000-character summaries), consolidated 4 at a time into level 1 while 6
or more are unconsolidated, every higher level rolled 5 at a time while 10 or more are
roots; then 20 live messages and one unanswered user message. On SQLite each size gets
its own migrated temporary file; with `--database-url` (Postgres) both conversations
share that database, are ANALYZEd after loading (as autovacuum would), and are deleted
at the end. Repetitions alternate between the sizes, so drift on a noisy machine hits
both alike; the figure that counts is the ratio large/small of the same run.

To keep the load within the time budget, archived messages carry a short text (their
token_count still says ~500 tokens) and rolled-up level-0 chunks a short transcript: a
turn never reads either. The root level-0 chunks, which the timeline query does read,
carry a full ~40,000-character transcript.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, event, func, insert, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

import memory.context
import memory.token_count
from bench.memory_support import (
    Person,
    backend,
    filler,
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
from gateway.events.hub import Hub
from gateway.jobs.memory_jobs import ArchiveMemory, MemoryJobs, build_jobs
from gateway.llm import Prompt
from gateway.metrics import Metrics
from gateway.settings import Settings
from gateway.turns.answering import Answerer, TurnContext, TurnLimits
from gateway.turns.persona import load_persona
from gateway.wiring import memory_limits, model_provider, stores_on
from memory.archive.archive import Archive
from memory.archive.numbers import MemoryLimits
from memory.archive.upkeep import ROLLUP
from memory.context import clock_context, fit_to_budget, render_live, render_timeline, system_prompt
from memory.profile.profiles import Profiles
from memory.storage.conversations import TurnState
from memory.storage.engine import session_factory
from memory.storage.models import (
    Chunk,
    ChunkStatus,
    Delivery,
    Message,
    Profile,
    Role,
    User,
)
from memory.storage.repositories import Repositories
from memory.token_count import estimate_tokens, message_tokens

GOAL_RATIO = 1.2
PER_CHUNK = 20  # messages per level-0 chunk
TOKENS_PER_ARCHIVED_MESSAGE = 500  # 20 messages ~ a 10,000-token chunk
LIVE_MESSAGES = 20
LIVE_TEXT_CHARS = 2_000
SUMMARY_CHARS = 6_000  # ~1,500 tokens, the default summary length
TRANSCRIPT_CHARS = 40_000  # ~10,000 tokens, a whole level-0 chunk
STUB_TRANSCRIPT = "[transcript kept short by the benchmark: no turn reads it]\n"
ARCHIVED_TEXT = "an archived message (text shortened by the benchmark; a turn never reads it)"
PROFILE_LINES = 150
MESSAGE_GAP = timedelta(minutes=5)
TIMEZONE = "Europe/Lisbon"
BATCH = 25_000
# Context window settings the gateway runs with by default (PARLEY_LLM_CONTEXT_TOKENS,
# PARLEY_LLM_MAX_REPLY_TOKENS).
TURN_LIMITS = TurnLimits(context_tokens=128_000, max_reply_tokens=2_048)
# Fixes to try on the scratch files (nothing outside the benchmark changes).
WHAT_IF = {
    # What `PRAGMA optimize` or an operator's ANALYZE would leave: planner statistics.
    "analyze": ("ANALYZE",),
    # `ix_chunks_roots` extended by seq_start: a level's roots come out in order, so the
    # roll-up query has no reason to walk the whole level by the unique index instead.
    "roots-ordered-index": (
        "DROP INDEX ix_chunks_roots",
        "CREATE INDEX ix_chunks_roots ON chunks (conversation_id, parent_id, level, seq_start)",
    ),
    # memory.token_count.estimate_tokens counting non-ASCII characters in C rather than in a
    # Python loop (same counts); patched into this process only, see use_fast_estimate().
    "fast-token-estimate": (),
}
LEFT_OUT = re.compile(r"^\((\d+) older archive rows left out for space\.\)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Options:
    small: int
    large: int
    repetitions: int
    warmup: int
    extra_repetitions: int
    what_if: tuple[str, ...]
    database_url: str | None
    as_json: bool


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.context_assembly",
        description="Turn context assembly time for a small and a large archive.",
    )
    parser.add_argument("--small", type=int, default=1_000, help="archived messages (1,000)")
    parser.add_argument("--large", type=int, default=1_000_000, help="archived messages (1M)")
    parser.add_argument("--repetitions", type=int, default=200, help="measured per size (200)")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured per size (20)")
    parser.add_argument(
        "--extra-repetitions",
        type=int,
        default=20,
        help="measured no-op roll-up jobs and worker sweeps per size (20)",
    )
    parser.add_argument(
        "--what-if",
        action="append",
        default=[],
        choices=sorted(WHAT_IF),
        help="try a fix: change the scratch files after loading (SQLite only), or patch "
        "the token estimate in this process; repeatable",
    )
    parser.add_argument(
        "--database-url",
        help="a scratch Postgres database (default: temporary SQLite files, one per size)",
    )
    parser.add_argument("--json", dest="as_json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    for name in ("small", "large"):
        if getattr(args, name) % PER_CHUNK or getattr(args, name) < PER_CHUNK:
            parser.error(f"--{name} must be a positive multiple of {PER_CHUNK}")
    if args.what_if and args.database_url:
        parser.error("--what-if applies to the SQLite scratch files only")
    return Options(
        small=args.small,
        large=args.large,
        repetitions=args.repetitions,
        warmup=args.warmup,
        extra_repetitions=args.extra_repetitions,
        what_if=tuple(args.what_if),
        database_url=args.database_url,
        as_json=args.as_json,
    )


# -- the archive's shape ------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Planned:
    level: int
    seq_start: int
    seq_end: int
    id: int = 0
    parent: Planned | None = None


def plan_archive(level_zero: int, limits: MemoryLimits) -> list[list[Planned]]:
    """Chunks per level, oldest first, as `Archive.plan_rollups` leaves them once every
    summary is ready: level 0 consolidates its oldest `consolidate_count` while at least
    `consolidate_at` are unconsolidated; a higher level rolls its oldest `rollup_batch`
    while at least `rollup_keep + rollup_batch` are roots. Rolling one at a time, as the
    jobs do, ends in the same place."""
    levels = [
        [
            Planned(0, i * PER_CHUNK + 1, (i + 1) * PER_CHUNK)
            for i in range(level_zero)  # chunk i holds messages 20i+1 .. 20i+20
        ]
    ]
    while True:
        level = len(levels) - 1
        if level == 0:
            threshold, size = limits.consolidate_at, limits.consolidate_count
        else:
            threshold, size = limits.rollup_keep + limits.rollup_batch, limits.rollup_batch
        current, parents, start = levels[level], [], 0
        while len(current) - start >= threshold:
            group = current[start : start + size]
            parent = Planned(level + 1, group[0].seq_start, group[-1].seq_end)
            for child in group:
                child.parent = parent
            parents.append(parent)
            start += size
        if not parents:
            return levels
        levels.append(parents)


# -- loading a conversation ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Seeded:
    user_id: uuid.UUID
    conversation_id: uuid.UUID
    archived: int
    chunks_per_level: tuple[int, ...]
    roots_per_level: tuple[int, ...]
    load_seconds: float


def _summary(chunk: Planned) -> str:
    # As long as the summariser is asked for at this level: older levels are coarser.
    chars = SUMMARY_CHARS * MemoryLimits().summary_tokens_at(chunk.level) // 1_500
    return filler(chars, f"Level {chunk.level} summary of messages {chunk.seq_start}-")


def _transcript(chunk: Planned, sent: Any) -> str:
    blocks = []
    per_message = TRANSCRIPT_CHARS // PER_CHUNK
    for seq in range(chunk.seq_start, chunk.seq_end + 1):
        who = "user Ana" if seq % 2 else "assistant"
        header = f"[{sent(seq):%Y-%m-%d %H:%M} · webchat · {who}]\n"
        blocks.append(header + filler(per_message - len(header)))
    return "\n\n".join(blocks) + "\n"


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose conversation a seed writes: known before any row is, for the clean-up."""

    user_id: uuid.UUID = field(default_factory=uuid.uuid4)
    conversation_id: uuid.UUID = field(default_factory=uuid.uuid4)


async def seed(
    engine: AsyncEngine,
    archived: int,
    limits: MemoryLimits,
    now: datetime,
    owner: Owner | None = None,
) -> Seeded:
    """One person's conversation with `archived` archived messages, written in bulk."""
    started = time.perf_counter()
    owner = owner or Owner()
    user_id, identity_id, conversation_id = owner.user_id, uuid.uuid4(), owner.conversation_id
    total = archived + LIVE_MESSAGES + 1  # the last one is the unanswered user message

    def sent(seq: int) -> datetime:
        return now - timedelta(minutes=1) - (total - seq) * MESSAGE_GAP

    async with engine.begin() as conn:
        await insert_person(
            conn,
            Person(user_id, identity_id, conversation_id),
            timezone=TIMEZONE,
            since=sent(1),
            last_at=sent(total),
            last_seq=total,
            last_user_seq=total,
            answered_seq=total - 2,
        )
        profile = "\n".join(
            filler(120, f"Fact {n}: the person") for n in range(1, PROFILE_LINES + 1)
        )
        await conn.execute(
            insert(Profile),
            [{"user_id": user_id, "text": profile, "revision": PROFILE_LINES, "updated_at": now}],
        )
        first_id = int(await conn.scalar(select(func.coalesce(func.max(Chunk.id), 0))) or 0) + 1

    levels = plan_archive(archived // PER_CHUNK, limits)
    next_id = first_id
    for chunks in levels:  # ids: level 0 first, in time order, as the jobs would mostly give
        for chunk in chunks:
            chunk.id = next_id
            next_id += 1

    def chunk_row(chunk: Planned) -> dict[str, Any]:
        root = chunk.parent is None
        transcript = None
        if chunk.level == 0:
            transcript = _transcript(chunk, sent) if root else STUB_TRANSCRIPT
        return {
            "id": chunk.id,
            "conversation_id": conversation_id,
            "level": chunk.level,
            "seq_start": chunk.seq_start,
            "seq_end": chunk.seq_end,
            "time_start": sent(chunk.seq_start),
            "time_end": sent(chunk.seq_end),
            "transcript": transcript,
            "summary": _summary(chunk),
            "status": ChunkStatus.READY,
            "attempts": 1,
            "last_error": None,
            "parent_id": None if root else chunk.parent.id,  # type: ignore[union-attr]
            "in_timeline": chunk.level == 0,
            "lease_until": None,
            "next_attempt_at": None,
            "user_notified": False,
            "facts_extracted": chunk.level == 0,
            "created_at": sent(chunk.seq_end),
            "updated_at": sent(chunk.seq_end),
        }

    # Parents before children: the parent_id foreign key is checked on insert.
    for chunks in reversed(levels):
        for start in range(0, len(chunks), BATCH // 10):
            async with engine.begin() as conn:
                await conn.execute(
                    insert(Chunk), [chunk_row(c) for c in chunks[start : start + BATCH // 10]]
                )

    level_zero_ids = [c.id for c in levels[0]]
    live_text = filler(LIVE_TEXT_CHARS, "A live message:")

    def message_row(seq: int) -> dict[str, Any]:
        archived_message = seq <= archived
        user = seq % 2 == 1
        body = ARCHIVED_TEXT if archived_message else live_text
        if seq == total:
            body = "So, what did we decide about the Lisbon trip in the end?"
        return {
            "conversation_id": conversation_id,
            "seq": seq,
            "role": Role.USER if user else Role.ASSISTANT,
            "channel": "webchat",
            "identity_id": identity_id if user else None,
            "author_name": "Ana" if user else "",
            "source": None,
            "text": body,
            "platform_message_id": None,
            "platform_ts": None,
            "created_at": sent(seq),
            "token_count": (
                TOKENS_PER_ARCHIVED_MESSAGE if archived_message else message_tokens(body)
            ),
            "chunk_id": level_zero_ids[(seq - 1) // PER_CHUNK] if archived_message else None,
            "reply_to_seq": None if user else seq - 1,
            "delivery": None if user else Delivery.SENT,
            "delivery_attempts": 0 if user else 1,
            "delivery_error": None,
            "delivery_parts_sent": 0 if user else 1,
        }

    for start in range(1, total + 1, BATCH):
        async with engine.begin() as conn:
            await conn.execute(
                insert(Message),
                [message_row(seq) for seq in range(start, min(total, start + BATCH - 1) + 1)],
            )
    async with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            await conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            # Explicit ids bypass the sequence; keep it ahead of them.
            await conn.exec_driver_sql(
                "SELECT setval(pg_get_serial_sequence('chunks', 'id'), "
                "(SELECT max(id) FROM chunks))"
            )
    return Seeded(
        user_id=user_id,
        conversation_id=conversation_id,
        archived=archived,
        chunks_per_level=tuple(len(chunks) for chunks in levels),
        roots_per_level=tuple(sum(c.parent is None for c in chunks) for chunks in levels),
        load_seconds=time.perf_counter() - started,
    )


# -- what a turn does before calling the model ------------------------------------------


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now


class CountingQueue:
    """`ArchiveMemory` enqueues a roll-up only if the swap moved something."""

    def __init__(self) -> None:
        self.enqueued = 0

    async def enqueue(self, job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
        self.enqueued += 1

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def build_prompt(
    persona: str, limits: TurnLimits, now: datetime, state: TurnState, context: TurnContext
) -> Prompt:
    """What `Answerer.answer` builds before calling the model, step for step."""
    clock = clock_context(now, state.timezone, state.previous_at)
    window = limits.context_tokens - limits.max_reply_tokens
    rows = render_timeline(context.timeline, state.timezone, budget=window // 2)
    profile = "\n".join(f"- {line}" for line in context.profile)
    system = system_prompt(persona, clock, rows, profile)
    budget = window - message_tokens(system)
    turns = fit_to_budget(render_live(state.live, state.timezone, group=state.group), budget)
    return Prompt(system, tuple(turns), max_tokens=limits.max_reply_tokens)


class CapturingLLM:
    """Records the prompt `Answerer.answer` would send, and answers at once."""

    name = "capture"
    model = "capture"
    offers_tools = True  # as the real model it stands in for; it never calls one
    sees_images = False

    def image_tokens(self, width: int, height: int) -> int:
        return 0

    def __init__(self) -> None:
        self.prompts: list[Prompt] = []

    async def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        self.prompts.append(prompt)
        yield "ok"

    async def aclose(self) -> None:
        return None


@dataclass
class Subject:
    label: str
    seeded: Seeded
    engine: AsyncEngine
    repos: Repositories
    archive: Archive
    profiles: Profiles
    memory: ArchiveMemory
    queue: CountingQueue
    jobs: MemoryJobs
    job_queue: CountingQueue
    samples: dict[str, list[float]] = field(default_factory=dict)
    sweeps: int = 0

    @property
    def conversation_id(self) -> uuid.UUID:
        return self.seeded.conversation_id

    def add(self, name: str, seconds: float) -> None:
        self.samples.setdefault(name, []).append(seconds)

    async def sweep(self) -> int:
        self.sweeps += 1
        return await self.jobs.sweep()


def subject(label: str, seeded: Seeded, engine: AsyncEngine, scratch: Path) -> Subject:
    # The parts as the gateway and a worker build them (offline provider: no model is
    # called here), on the bench's seeded engine.
    settings = Settings(_env_file=None, data_dir=scratch / "data")
    stores = stores_on(engine, settings, SystemClock())
    queue, job_queue = CountingQueue(), CountingQueue()
    clock = FixedClock(datetime.now(UTC))
    memory = ArchiveMemory(
        stores.archive, stores.profiles, queue.enqueue, clock, scratch / "archive"
    )
    jobs = build_jobs(
        settings,
        archive=stores.archive,
        repos=stores.repos,
        profiles=stores.profiles,
        provider=model_provider(settings, Metrics()),
        enqueue=job_queue.enqueue,
        clock=SystemClock(),
    )
    return Subject(
        label,
        seeded,
        engine,
        stores.repos,
        stores.archive,
        stores.profiles,
        memory,
        queue,
        jobs,
        job_queue,
    )


async def assemble(
    s: Subject, persona: str, now: datetime, *, record: bool
) -> tuple[TurnState, TurnContext, Prompt]:
    started = time.perf_counter()
    context = await s.memory.before_turn(s.conversation_id)
    t_before = time.perf_counter()
    state = await s.repos.conversations.load_turn(s.conversation_id)
    t_load = time.perf_counter()
    assert state is not None, "the benchmark conversation must owe a reply"
    prompt = build_prompt(persona, TURN_LIMITS, now, state, context)
    done = time.perf_counter()
    if record:
        s.add("assembly", done - started)
        s.add("before_turn", t_before - started)
        s.add("load_turn", t_load - t_before)
        s.add("render", done - t_load)
    return state, context, prompt


async def components(s: Subject, live_tokens: int, *, record: bool) -> None:
    """The parts of `before_turn` one by one, and `after_turn` (with the live window's
    tokens after a short reply, as `TurnRunner` passes them: under the limit, no cut)."""
    cid = s.conversation_id
    steps: list[tuple[str, Any]] = [
        ("prepare_turn (swap+timeline)", lambda: s.archive.prepare_turn(cid)),
        ("profile", lambda: s.profiles.of_conversation(cid)),
        ("after_turn", lambda: s.memory.after_turn(cid, live_tokens)),
        ("owes_reply (loop's next round)", lambda: _owes_reply(s)),
    ]
    for name, call in steps:
        started = time.perf_counter()
        await call()
        if record:
            s.add(name, time.perf_counter() - started)


async def extras(s: Subject, *, record: bool) -> None:
    """Not part of a turn, but run for every long conversation: the roll-up job that
    follows each summary and each swap (here with nothing to roll up), and the sweep
    every worker (or the embedded runner) makes every 10 s."""
    for name, call in (
        ("roll-up job (no-op)", lambda: s.jobs.run(ROLLUP, str(s.conversation_id))),
        ("worker sweep", s.sweep),
    ):
        started = time.perf_counter()
        await call()
        if record:
            s.add(name, time.perf_counter() - started)


async def check_against_runner(s: Subject, persona: str, now: datetime) -> str:
    """'identical' if the prompt built here is the one `Answerer.answer` sends, the turn
    runner's answer from the model."""
    llm = CapturingLLM()
    answerer = Answerer(
        llm=llm,
        hub=Hub(),
        clock=FixedClock(now),
        persona=persona,
        limits=TURN_LIMITS,
        conversations=s.repos.conversations,
        metrics=Metrics(),
        recall=None,
    )
    state, context, ours = await assemble(s, persona, now, record=False)
    await answerer.answer(state, context, state.unanswered[-1])
    return "identical" if llm.prompts == [ours] else "DIFFERENT"


# -- query plans ----------------------------------------------------------------------------


@contextlib.contextmanager
def captured(engine: AsyncEngine) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def listen(
        conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        seen.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", listen)


async def edge_query(s: Subject, before_seq: int) -> None:
    """`Conversations.load_turn`'s archive-edge query (when the whole live window is this turn's
    own messages), run as written there."""
    async with session_factory(s.engine)() as session:
        await session.scalar(
            select(Message.created_at)
            .where(Message.conversation_id == s.conversation_id, Message.seq < before_seq)
            .order_by(Message.seq.desc())
            .limit(1)
        )


async def _owes_reply(s: Subject) -> None:
    owes_reply = getattr(s.repos.conversations, "owes_reply", None)
    if owes_reply is not None:
        await owes_reply(s.conversation_id)


async def query_plans(s: Subject) -> list[dict[str, Any]]:
    cid, total = s.conversation_id, s.seeded.archived + LIVE_MESSAGES + 1
    calls: list[tuple[str, Any]] = [
        ("turn loop, later rounds: Conversations.owes_reply", lambda: _owes_reply(s)),
        ("before_turn: Archive.prepare_turn", lambda: s.archive.prepare_turn(cid)),
        ("before_turn: Profiles.of_conversation", lambda: s.profiles.of_conversation(cid)),
        ("Conversations.load_turn", lambda: s.repos.conversations.load_turn(cid)),
        (
            "after_turn: Archive.cut (runs once the live window passes its limit)",
            lambda: s.archive.cut(cid, datetime.now(UTC)),
        ),
        (
            "Conversations.load_turn archive edge (when all live is new)",
            lambda: edge_query(s, total),
        ),
        ("job: roll-up (no-op)", lambda: s.jobs.run(ROLLUP, str(cid))),
        ("worker sweep", s.sweep),
    ]
    plans = []
    for name, call in calls:
        with captured(s.engine) as seen:
            await call()
        for statement, parameters in seen:
            plans.append(
                {"call": name, "sql": " ".join(statement.split())}
                | await explain(s.engine, statement, parameters)
            )
    return plans


async def explain(engine: AsyncEngine, statement: str, parameters: Any) -> dict[str, Any]:
    sqlite = engine.dialect.name == "sqlite"
    prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
    async with engine.connect() as conn:
        result = await conn.exec_driver_sql(prefix + statement, tuple(parameters))
        rows: list[tuple[Any, ...]] = [tuple(row) for row in result]
    lines = [str(row[3]) if sqlite else str(row[0]) for row in rows]
    if sqlite:
        scans = [line for line in lines if line.startswith("SCAN")]
    else:
        scans = [line.strip() for line in lines if "Seq Scan" in line]
    indexes = sorted(
        {
            match.group(1)
            for line in lines
            for match in re.finditer(r"(?:USING (?:COVERING )?INDEX|Index.* using) (\w+)", line)
        }
        | (
            {"INTEGER PRIMARY KEY"}
            if any("INTEGER PRIMARY KEY" in line for line in lines)
            else set()
        )
    )
    return {"plan": lines, "indexes": indexes, "scans": scans}


# -- the run ----------------------------------------------------------------------------------


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(percentile(ordered, 50) * 1000, 3),
        "p90_ms": round(percentile(ordered, 90) * 1000, 3),
        "mean_ms": round(sum(ordered) / len(ordered) * 1000, 3),
    }


def prompt_figures(s: Subject, context: TurnContext, prompt: Prompt) -> dict[str, Any]:
    window = TURN_LIMITS.context_tokens - TURN_LIMITS.max_reply_tokens
    timeline = render_timeline(context.timeline, TIMEZONE, budget=window // 2)
    left_out = LEFT_OUT.search(timeline)
    levels = len(s.seeded.chunks_per_level) - 1
    limits = s.archive.limits
    return {
        "timeline_rows": len(context.timeline),
        "rows_by_level": {
            str(level): sum(row.level == level for row in context.timeline)
            for level in sorted({row.level for row in context.timeline})
        },
        "levels_above_0": levels,
        "max_timeline_rows": limits.max_timeline_rows(levels),
        "timeline_rows_left_out_for_space": int(left_out.group(1)) if left_out else 0,
        "timeline_tokens": estimate_tokens(timeline),
        "timeline_budget_tokens": window // 2,
        "profile_lines": len(context.profile),
        "system_tokens": message_tokens(prompt.system),
        "live_turns": len(prompt.turns),
        "live_tokens": sum(message_tokens(turn.content) for turn in prompt.turns),
        "prompt_tokens": message_tokens(prompt.system)
        + sum(message_tokens(turn.content) for turn in prompt.turns),
        "prompt_bound_tokens": window,
    }


@contextlib.asynccontextmanager
async def subjects(options: Options, limits: MemoryLimits) -> AsyncIterator[list[Subject]]:
    now = datetime.now(UTC)
    sizes = [("small", options.small), ("large", options.large)]
    async with scratch_dir("parley-bench-context-") as scratch:
        made: list[Subject] = []
        owners: list[Owner] = []
        engines: list[AsyncEngine] = []
        try:
            shared = None
            if options.database_url:
                shared = await migrated_engine(normalise_url(options.database_url))
                engines.append(shared)
            for label, archived in sizes:
                if shared is None:
                    engine = await migrated_engine(sqlite_url(scratch / f"{label}.db"))
                    engines.append(engine)
                else:
                    engine = shared
                owners.append(Owner())
                seeded = await seed(engine, archived, limits, now, owners[-1])
                async with engine.begin() as conn:
                    for change in options.what_if:
                        for statement in WHAT_IF[change]:
                            await conn.exec_driver_sql(statement)
                made.append(subject(label, seeded, engine, scratch))
            if shared is not None:
                async with shared.begin() as conn:
                    await conn.execute(text("ANALYZE"))
            yield made
        finally:
            if options.database_url and engines:
                for owner in owners:  # also what a seed cut short left behind
                    async with engines[0].begin() as conn:
                        cid = owner.conversation_id
                        await conn.execute(delete(Message).where(Message.conversation_id == cid))
                        await conn.execute(delete(Chunk).where(Chunk.conversation_id == cid))
                        await conn.execute(delete(User).where(User.id == owner.user_id))
            for engine in engines:
                await engine.dispose()


def file_bytes(path: str | None) -> int | None:
    """Size of the SQLite file and its WAL (None on a server database)."""
    if not path:
        return None
    files = [Path(path), Path(path + "-wal")]
    return sum(f.stat().st_size for f in files if f.exists())


async def run(options: Options) -> dict[str, Any]:
    limits = memory_limits(Settings(_env_file=None))  # the gateway's defaults
    persona = load_persona(None)
    url = normalise_url(options.database_url) if options.database_url else "sqlite"
    async with subjects(options, limits) as (small, large):
        now = datetime.now(UTC)
        checks = {await check_against_runner(s, persona, now) for s in (small, large)}
        same_prompt = checks.pop() if len(checks) == 1 else "DIFFERENT"
        plans = {s.label: await query_plans(s) for s in (small, large)}
        for index in range(options.warmup + options.repetitions):
            record = index >= options.warmup
            # Alternate the order, so neither size always runs right after the other.
            order = (small, large) if index % 2 else (large, small)
            for s in order:
                state, _, _ = await assemble(s, persona, now, record=record)
                # What TurnRunner passes to after_turn: the live window plus the reply.
                live_tokens = sum(m.token_count for m in state.live) + message_tokens("ok")
                await components(s, live_tokens, record=record)
        for index in range(options.extra_repetitions + 2):
            for s in (small, large) if index % 2 else (large, small):
                await extras(s, record=index >= 2)
        figures: dict[str, Any] = {}
        for s in (small, large):
            _, context, prompt = await assemble(s, persona, now, record=False)
            db_file = s.engine.url.database if s.engine.dialect.name == "sqlite" else None
            figures[s.label] = {
                "archived_messages": s.seeded.archived,
                "chunks_per_level": list(s.seeded.chunks_per_level),
                "roots_per_level": list(s.seeded.roots_per_level),
                "load_seconds": round(s.seeded.load_seconds, 1),
                "database_bytes": file_bytes(db_file),
                "timings": {name: stats(values) for name, values in s.samples.items()},
                "prompt": prompt_figures(s, context, prompt),
                "rollups_enqueued_by_before_turn": s.queue.enqueued,
                # Per sweep: how many jobs the sweep queued (roll-ups with nothing to do).
                "jobs_queued_per_sweep": round(s.job_queue.enqueued / max(1, s.sweeps), 2),
            }
    small_t, large_t = figures["small"]["timings"], figures["large"]["timings"]
    ratios = {
        name: {
            "p50": round(large_t[name]["p50_ms"] / small_t[name]["p50_ms"], 3),
            "p90": round(large_t[name]["p90_ms"] / small_t[name]["p90_ms"], 3),
        }
        for name in small_t
    }
    scans = {
        f"{size}: {p['call']}: {line.lstrip('-> ')}"
        for size, ps in plans.items()
        for p in ps
        for line in p["scans"]
    }
    # Only chunks and messages grow with the archive; conversations, users and profiles
    # hold a row or two here, and a planner with statistics scans such tables by choice.
    scanning = sorted(s for s in scans if re.search(r"\b(chunks|messages)\b", s))
    small_tables = sorted(scans - set(scanning))
    return {
        "machine": machine(),
        "database": backend(url),
        "repetitions": options.repetitions,
        "warmup": options.warmup,
        "extra_repetitions": options.extra_repetitions,
        "what_if": list(options.what_if),
        "prompt_matches_turn_runner": same_prompt,
        "sizes": figures,
        "ratios_large_over_small": ratios,
        "goal_ratio": GOAL_RATIO,
        "goal_met": ratios["assembly"]["p50"] <= GOAL_RATIO,
        "query_plans": plans,
        "scans": scanning,
        "small_table_scans": small_tables,
    }


def render(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    lines = [
        f"Parley context assembly: {result['database']}, {machine_line(result['machine'])}",
        f"{result['repetitions']} measured assemblies per size after {result['warmup']} "
        f"warm-up, sizes alternating; prompt vs the one Answerer.answer sends: "
        f"{result['prompt_matches_turn_runner']}",
        "what-if (fixes tried on the scratch files / in this process): "
        + (", ".join(result["what_if"]) or "none"),
        "",
    ]
    for label, size in sizes.items():
        chunks = "/".join(str(n) for n in size["chunks_per_level"])
        roots = "/".join(str(n) for n in size["roots_per_level"])
        db = size["database_bytes"]
        lines.append(
            f"{label}: {size['archived_messages']:,} archived messages; chunks per level "
            f"{chunks} (roots {roots}); loaded in {size['load_seconds']} s"
            + (f"; {db / 1e6:.0f} MB file" if db else "")
        )
    lines += [
        "",
        f"{'step (ms)':<30}{'small p50':>11}{'p90':>9}{'large p50':>11}{'p90':>9}"
        f"{'ratio p50':>11}{'p90':>8}",
    ]
    for name, ratio in result["ratios_large_over_small"].items():
        a, b = sizes["small"]["timings"][name], sizes["large"]["timings"][name]
        lines.append(
            f"{name:<30}{a['p50_ms']:>11.3f}{a['p90_ms']:>9.3f}{b['p50_ms']:>11.3f}"
            f"{b['p90_ms']:>9.3f}{ratio['p50']:>11.2f}{ratio['p90']:>8.2f}"
        )
    lines += ["", f"{'prompt':<34}{'small':>10}{'large':>10}"]
    for key in (
        "levels_above_0",
        "timeline_rows",
        "max_timeline_rows",
        "timeline_rows_left_out_for_space",
        "timeline_tokens",
        "timeline_budget_tokens",
        "system_tokens",
        "live_turns",
        "live_tokens",
        "prompt_tokens",
        "prompt_bound_tokens",
    ):
        lines.append(
            f"{key:<34}{sizes['small']['prompt'][key]:>10,}{sizes['large']['prompt'][key]:>10,}"
        )
    by_level = {label: size["prompt"]["rows_by_level"] for label, size in sizes.items()}
    lines.append(f"rows by level: small {by_level['small']}, large {by_level['large']}")
    lines += ["", "query plans (large archive):"]
    for plan in result["query_plans"]["large"]:
        lines.append(f"  {plan['call']}: {plan['sql'][:150]}")
        lines += [f"      {line}" for line in plan["plan"]]
    lines.append("")
    lines.append("full scans of chunks or messages:")
    lines += [f"  {scan}" for scan in result["scans"]] or ["  none"]
    if result["small_table_scans"]:
        lines.append("scans of one- or two-row tables (the planner's choice):")
        lines += [f"  {scan}" for scan in result["small_table_scans"]]
    ratio = result["ratios_large_over_small"]["assembly"]
    verdict = "met" if result["goal_met"] else "NOT met"
    lines.append(
        f"assembly large/small: p50 x{ratio['p50']:.2f}, p90 x{ratio['p90']:.2f}; "
        f"goal p50 ratio <= {result['goal_ratio']}: {verdict}"
    )
    return "\n".join(lines)


def fast_estimate(text: str) -> int:
    """`memory.token_count.estimate_tokens`, same result, with the wide characters counted by
    the codec instead of a Python loop over every character."""
    if text.isascii():
        return (len(text) + 3) // 4
    wide = len(text) - len(text.encode("ascii", "ignore"))
    return (len(text) - wide + 3) // 4 + wide


def use_fast_estimate() -> None:
    """Patch `fast_estimate` in wherever the prompt is measured (this process only)."""
    vars(memory.context)["estimate_tokens"] = fast_estimate
    memory.token_count.message_tokens.__defaults__ = (fast_estimate,)
    memory.context.fit_to_budget.__defaults__ = (fast_estimate,)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    if "fast-token-estimate" in options.what_if:
        use_fast_estimate()
    result = asyncio.run(run(options))
    print(json.dumps(result, indent=2) if options.as_json else render(result))


if __name__ == "__main__":
    main()
