"""How the process is, for its probes: ready (the database answering with the current
schema, the job queue reachable), and the metrics with the gauges read from what is
stored."""

from __future__ import annotations

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.clock import Clock
from gateway.jobs.queue import JobQueue
from gateway.metrics import Metrics
from memory.archive.archive import Archive
from memory.profile.profiles import Profiles
from memory.storage.deliveries import Deliveries
from memory.storage.migrate import current_revision, head_revision
from memory.storage.models import ChunkStatus

log = structlog.get_logger(__name__)


class Health:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        queue: JobQueue,
        metrics: Metrics,
        archive: Archive,
        deliveries: Deliveries,
        profiles: Profiles,
        clock: Clock,
    ) -> None:
        self._engine = engine
        self._queue = queue
        self._metrics = metrics
        self._archive = archive
        self._deliveries = deliveries
        self._profiles = profiles
        self._clock = clock

    async def unready(self) -> str | None:
        """Why the process cannot serve now; None when it can."""
        try:
            revision = await current_revision(self._engine)
        except Exception as exc:  # any database failure means "not ready", with the reason
            return type(exc).__name__
        if revision != head_revision():
            return "schema out of date"
        if not await self._queue.reachable():
            return "job queue unreachable"
        return None

    async def metrics(self) -> bytes:
        """Prometheus' text format. The stored-state gauges are read now; if the
        database does not answer, they keep their last values and the counters are
        served anyway."""
        try:
            await self._read_stored_state()
        except Exception as exc:
            log.warning("metrics without stored state", error=type(exc).__name__)
        return self._metrics.render()

    async def _read_stored_state(self) -> None:
        metrics = self._metrics
        backlog = await self._archive.backlog()
        for status in ChunkStatus:
            metrics.archive_chunks.labels(status.value).set(backlog.chunks.get(status, 0))
        metrics.extraction_backlog.set(backlog.extractions.depth)
        waiting = backlog.summaries.oldest_at
        lag = 0.0 if waiting is None else (self._clock.now() - waiting).total_seconds()
        metrics.queue_lag.set(max(lag, 0.0))
        metrics.uncertain_parts.set(await self._deliveries.uncertain_parts())
        metrics.facts_refused.set(await self._profiles.facts_refused())
