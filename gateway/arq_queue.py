"""Everything arq-specific, in one module: the queue client `parley serve` uses, and
the worker `parley worker` runs. Replacing arq means replacing this file.

arq is only the wake-up call. Which worker may summarise a chunk is decided by the
chunk's lease in the database, and a periodic sweep re-queues whatever is due, so a
flushed Redis or a killed worker costs time, never work.
"""

from __future__ import annotations

from typing import Any

from arq import ArqRedis, create_pool, cron, func
from arq.connections import RedisSettings
from arq.worker import Worker

from gateway.archiving import MemoryJobs, build_jobs, memory_limits
from gateway.clock import SystemClock
from gateway.llm import build_provider
from gateway.settings import Settings
from memory.archive import Archive
from memory.db import create_engine, session_factory
from memory.profile import Profiles
from memory.store import Store

RUN_JOB = "run_job"
QUEUE_NAME = "parley:jobs"
# Generous: a summary of a large chunk on a slow model takes minutes. A worker killed
# mid-job is recovered through the chunk lease, not through this timeout.
JOB_TIMEOUT_SECONDS = 900
SWEEP_SECONDS = {0, 10, 20, 30, 40, 50}


class ArqQueue:
    def __init__(self, redis_url: str | None = None, *, pool: ArqRedis | None = None) -> None:
        self._settings = RedisSettings.from_dsn(redis_url) if redis_url else None
        self._pool = pool

    async def start(self) -> None:
        if self._pool is None:
            assert self._settings is not None
            self._pool = await create_pool(self._settings, default_queue_name=QUEUE_NAME)

    async def close(self) -> None:
        if self._pool is not None and self._settings is not None:
            await self._pool.aclose()

    async def enqueue(self, job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
        assert self._pool is not None, "start() the queue first"
        # None back means a job with this key is queued or running: that is the point.
        await self._pool.enqueue_job(
            RUN_JOB, job, arg, _job_id=key, _defer_by=defer or None, _queue_name=QUEUE_NAME
        )


async def _startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    engine = create_engine(settings.resolved_database_url)
    sessions = session_factory(engine)
    provider = build_provider(settings)
    queue = ArqQueue(pool=ctx["redis"])
    ctx["engine"], ctx["provider"] = engine, provider
    ctx["jobs"] = build_jobs(
        settings,
        archive=Archive(sessions, memory_limits(settings)),
        store=Store(sessions),
        profiles=Profiles(sessions),
        provider=provider,
        enqueue=queue.enqueue,
        clock=SystemClock(),
    )


async def _shutdown(ctx: dict[str, Any]) -> None:
    if "provider" in ctx:
        await ctx["provider"].aclose()
    if "engine" in ctx:
        await ctx["engine"].dispose()


async def run_job(ctx: dict[str, Any], job: str, arg: str) -> None:
    jobs: MemoryJobs = ctx["jobs"]
    await jobs.run(job, arg)


async def sweep(ctx: dict[str, Any]) -> None:
    jobs: MemoryJobs = ctx["jobs"]
    await jobs.sweep()


def build_worker(settings: Settings, *, burst: bool = False, poll_delay: float = 0.5) -> Worker:
    if not settings.redis_url:
        raise ValueError("PARLEY_REDIS_URL is required for `parley worker`")
    return Worker(
        functions=[func(run_job, name=RUN_JOB, max_tries=1, timeout=JOB_TIMEOUT_SECONDS)],
        cron_jobs=[cron(sweep, second=SWEEP_SECONDS, run_at_startup=True, unique=True)],
        redis_settings=RedisSettings.from_dsn(settings.redis_url),
        queue_name=QUEUE_NAME,
        on_startup=_startup,
        on_shutdown=_shutdown,
        ctx={"settings": settings},
        keep_result=0,
        max_jobs=settings.embedded_job_concurrency * 2,
        burst=burst,
        poll_delay=poll_delay,
        handle_signals=not burst,
    )
