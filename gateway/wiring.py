"""The parts every Parley process builds alike from its settings: `parley serve`
(`gateway.services`), `parley worker` (`gateway.jobs.arq_worker`), the CLI and the
benches take them from here, so a setting means the same in each of them.
"""

from __future__ import annotations

import hashlib
import socket
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.clock import Clock
from gateway.llm import LLMProvider, build_provider
from gateway.llm.base import Usage
from gateway.metrics import Metrics
from gateway.settings import Settings
from memory.archive.archive import Archive
from memory.archive.numbers import MemoryLimits
from memory.profile.profiles import Profiles
from memory.profile.upkeep import ProfileLimits
from memory.storage.engine import create_engine, session_factory
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens


def archive_dir(settings: Settings) -> Path:
    """Where the transcript files of archived chunks go: an export of the archive (the
    database holds its truth), under the data dir."""
    return settings.data_dir / "archive"


def memory_limits(settings: Settings) -> MemoryLimits:
    configured = MemoryLimits(
        live_window_tokens=settings.live_window_tokens,
        chunk_tokens=settings.chunk_tokens,
        chunk_min_tokens=settings.chunk_min_tokens,
        summary_tokens=settings.summary_tokens,
        summary_window_tokens=settings.summary_window_tokens or settings.llm_context_tokens // 2,
        consolidate_at=settings.consolidate_at,
        consolidate_count=settings.consolidate_count,
        rollup_keep=settings.rollup_keep,
        rollup_batch=settings.rollup_batch,
    )
    return configured.scaled(settings.llm_context_tokens)


def profile_limits(settings: Settings) -> ProfileLimits:
    return ProfileLimits(
        tidy_at_chars=settings.profile_tidy_at_chars,
        tidy_target_chars=settings.profile_tidy_target_chars,
        regrow_chars=settings.profile_tidy_regrow_chars,
        max_passes=settings.profile_tidy_max_passes,
        backoff_seconds=settings.profile_tidy_backoff_seconds,
    )


@dataclass(frozen=True, slots=True)
class Stores:
    """The database and what reads and writes it: repositories, archive, profiles."""

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    repos: Repositories
    archive: Archive
    profiles: Profiles

    async def close(self) -> None:
        await self.engine.dispose()


def open_stores(settings: Settings, clock: Clock, *, holder: str | None = None) -> Stores:
    """Nothing here does I/O. `holder`: who this process is in leases (None: a name of
    its own, as a worker's, which must never be taken for a gateway's)."""
    return stores_on(create_engine(settings.resolved_database_url), settings, clock, holder=holder)


def stores_on(
    engine: AsyncEngine, settings: Settings, clock: Clock, *, holder: str | None = None
) -> Stores:
    """The stores of `open_stores` on an engine made elsewhere (a benchmark's or a
    test's, already migrated and seeded)."""
    sessions = session_factory(engine)
    repos = Repositories.open(
        sessions,
        count_tokens=message_tokens,
        now=clock.now,
        holder=holder,
        archive_dir=archive_dir(settings),
    )
    archive = Archive(sessions, memory_limits(settings))
    return Stores(engine, sessions, repos, archive, Profiles(sessions))


def model_provider(settings: Settings, metrics: Metrics) -> LLMProvider:
    """The configured model, counting the tokens of every call in `metrics`."""
    return build_provider(settings, on_usage=partial(_count_usage, metrics))


def _count_usage(metrics: Metrics, usage: Usage) -> None:
    metrics.count_tokens(prompt=usage.prompt, cached=usage.cached, completion=usage.completion)


def replica_name(settings: Settings) -> str:
    """Who holds this replica's leases: where it runs (host, port, data dir), so the same
    replica restarted after a crash takes its conversations back at once instead of
    waiting for its own leases to lapse. Two live processes cannot share all three. The
    data dir goes in as a digest: a lease's holder is at most 64 characters."""
    data_dir = hashlib.sha256(str(settings.data_dir.resolve()).encode()).hexdigest()[:12]
    return f"{socket.gethostname()[:32]}:{settings.port}:{data_dir}"
