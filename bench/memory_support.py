"""Small helpers shared by the memory benchmarks (context assembly, summarisation
throughput, idle worker CPU): machine facts, percentiles, databases, CPU time."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import platform
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.logs import configure_logging
from gateway.settings import Settings
from memory.storage.engine import create_engine
from memory.storage.migrate import migrate
from memory.storage.models import Conversation, ConversationKind, Identity, User

ROOT = Path(__file__).resolve().parent.parent


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not ordered:
        raise ValueError("no values")
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit() -> str:
    """The checked-out commit, '+dirty' if the work tree has changes; 'unknown' without git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "commit": commit(),
    }


def machine_line(facts: dict[str, Any]) -> str:
    return (
        f"{facts['cpus']} CPUs ({facts['cpu_model']}), Python {facts['python']}, "
        f"commit {facts['commit']}, load average {facts['load_average_1m']:.2f}"
    )


def normalise_url(url: str) -> str:
    """A database URL as the gateway resolves it (async driver named)."""
    resolved: str = Settings(_env_file=None, database_url=url).resolved_database_url
    return resolved


def backend(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"


async def migrated_engine(url: str) -> AsyncEngine:
    """An engine (the gateway's own factory) on a database brought to head."""
    engine = create_engine(url)
    await migrate(engine)
    return engine


@contextlib.asynccontextmanager
async def scratch_dir(prefix: str) -> AsyncIterator[Path]:
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        yield Path(scratch)


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process and all its threads so far (Linux /proc)."""
    split = process_cpu_split(pid)
    return None if split is None else sum(split)


def process_cpu_split(pid: int) -> tuple[float, float] | None:
    """User and system CPU time of a process and all its threads so far (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return None
    # Fields after the command name, which is in parentheses and may contain spaces.
    fields = stat.rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def log_to_devnull() -> None:
    """The gateway's logging as a worker runs it (INFO, JSON lines), written to
    /dev/null: logging still costs what it costs, and the output stays readable."""
    configure_logging()
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(_devnull())


@functools.cache
def _devnull() -> TextIO:
    # One for the process' life: a second call (several benches' tests in one test
    # process) opening another would leave the first to the garbage collector, whose
    # ResourceWarning then fails whichever test it lands in.
    return open(os.devnull, "w", encoding="utf-8")


def filler(chars: int, seed: str = "") -> str:
    """Plain English-looking text of exactly `chars` characters (about 4 a token)."""
    words = [
        "the",
        "person",
        "asked",
        "about",
        "the",
        "trip",
        "to",
        "Lisbon",
        "and",
        "the",
        "assistant",
        "suggested",
        "trains",
        "booked",
        "early,",
        "a",
        "budget",
        "of",
        "four",
        "hundred",
        "euros,",
        "a",
        "call",
        "with",
        "Marta",
        "on",
        "Friday,",
        "the",
        "dentist",
        "moved",
        "to",
        "Tuesday",
        "at",
        "nine,",
        "and",
        "the",
        "draft",
        "of",
        "the",
        "report",
        "due",
        "next",
        "month",
    ]
    out: list[str] = [seed] if seed else []
    size = len(seed)
    index = 0
    while size < chars:
        word = words[index % len(words)]
        out.append(word)
        size += len(word) + 1
        index += 1
    return " ".join(out)[:chars]


@dataclass(frozen=True)
class Person:
    user_id: uuid.UUID
    identity_id: uuid.UUID
    conversation_id: uuid.UUID


async def insert_person(
    conn: AsyncConnection,
    ids: Person,
    *,
    timezone: str,
    since: datetime,
    last_at: datetime,
    last_seq: int,
    last_user_seq: int,
    answered_seq: int,
) -> None:
    """A person "Ana" with a web chat identity and their conversation up to `last_seq`,
    written directly (a benchmark's world, not the gateway's way in)."""
    await conn.execute(
        insert(User),
        [{"id": ids.user_id, "display_name": "Ana", "timezone": timezone, "created_at": since}],
    )
    await conn.execute(
        insert(Identity),
        [
            {
                "id": ids.identity_id,
                "channel": "webchat",
                "external_id": f"bench-{ids.user_id.hex}",
                "user_id": ids.user_id,
                "display_name": "Ana",
                "created_at": since,
            }
        ],
    )
    await conn.execute(
        insert(Conversation),
        [
            {
                "id": ids.conversation_id,
                "kind": ConversationKind.PERSONAL,
                "user_id": ids.user_id,
                "title": "Ana",
                "created_at": since,
                "last_message_at": last_at,
                "last_seq": last_seq,
                "last_user_seq": last_user_seq,
                "answered_seq": answered_seq,
            }
        ],
    )
