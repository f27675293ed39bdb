"""Everything arq-specific, in one module: the queue client `parley serve` uses, and
the worker `parley worker` runs. Replacing arq means replacing this file.

arq is only the wake-up call. Which worker may summarise a chunk is decided by the
chunk's lease in the database, and a periodic sweep re-queues whatever is due, so a
flushed Redis or a killed worker costs time, never work.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from typing import Any, cast
from wsgiref.simple_server import WSGIServer

import structlog
from arq import ArqRedis, cron, func
from arq.connections import RedisSettings
from arq.typing import WorkerCoroutine
from arq.worker import Worker, async_check_health
from prometheus_client import start_http_server
from redis.asyncio import ConnectionPool
from redis.exceptions import RedisError

from gateway.backoff import full_jitter
from gateway.clock import SystemClock
from gateway.jobs.memory_jobs import JOBS, MemoryJobs, build_jobs
from gateway.jobs.queue import Jobs
from gateway.metrics import Metrics
from gateway.settings import Settings
from gateway.wiring import model_provider, open_stores

QUEUE_NAME = "parley:jobs"
# How often a worker renews its health key (`parley worker --check` reads it).
HEALTH_CHECK_SECONDS = 30
# Generous: a summary of a large chunk on a slow model takes minutes. A worker killed
# mid-job is recovered through the chunk lease, not through this timeout.
JOB_TIMEOUT_SECONDS = 900
SWEEP_SECONDS = {0, 10, 20, 30, 40, 50}
RECONNECT_BASE_SECONDS = 1.0
REDIS_TIMEOUT = 3.0
RECONNECT_MAX_SECONDS = 30.0

log = structlog.get_logger(__name__)


# Errors that mean "Redis is not there right now", as opposed to a bug of ours.
REDIS_DOWN = (RedisError, OSError, asyncio.TimeoutError)


class ArqQueue:
    """The queue `parley serve` and the jobs enqueue into.

    Redis being down is not an error here: a job that cannot be queued is logged and
    left to the sweep, which finds it in the database once Redis is back. So a turn,
    a webhook or a job never fails because of Redis.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        key_epoch: float,
        pool: ArqRedis | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._url = redis_url
        self._pool = pool
        self._epoch = key_epoch
        self._now = now

    async def start(self, jobs: Jobs | None = None) -> None:
        """Connect for enqueueing; `jobs` run in `parley worker` processes, not here."""
        if self._pool is None:
            assert self._url is not None
            # No ping: the gateway starts whether or not Redis is up yet. Short socket
            # timeouts: an unreachable Redis must not hold up a turn that enqueues.
            connections = ConnectionPool.from_url(
                self._url, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT
            )
            self._pool = ArqRedis(connections, default_queue_name=QUEUE_NAME)

    async def close(self) -> None:
        if self._pool is not None and self._url is not None:
            await self._pool.aclose(close_connection_pool=True)

    async def reachable(self) -> bool:
        if self._pool is None:
            return False
        try:
            return bool(await self._pool.ping())
        except REDIS_DOWN:
            return False

    async def enqueue(self, job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
        assert self._pool is not None, "start() the queue first"
        # A worker killed mid-job leaves its job's keys behind for as long as the job
        # timeout, and arq refuses a job whose id they hold. Ids renewed every epoch
        # (the lease time) bound that to one epoch; leases in the database make sure
        # the same work never runs twice at once.
        job_id = f"{key}@{int(self._now() // self._epoch)}"
        try:
            # None back means a job with this id is queued or running: that is the point.
            await self._pool.enqueue_job(
                job, arg, _job_id=job_id, _defer_by=defer or None, _queue_name=QUEUE_NAME
            )
        except REDIS_DOWN as exc:
            log.warning("could not queue a job; the sweep will", key=key, error=str(exc))


async def _startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    clock = SystemClock()
    stores = open_stores(settings, clock)
    provider = model_provider(settings, ctx["metrics"])
    queue = ArqQueue(pool=ctx["redis"], key_epoch=settings.job_lease_seconds)
    ctx["stores"], ctx["provider"] = stores, provider
    ctx["jobs"] = build_jobs(
        settings,
        archive=stores.archive,
        repos=stores.repos,
        profiles=stores.profiles,
        provider=provider,
        enqueue=queue.enqueue,
        clock=clock,
    )


async def _shutdown(ctx: dict[str, Any]) -> None:
    # Popped, so closing twice (arq's shutdown, then ours after a lost Redis) is safe.
    if (provider := ctx.pop("provider", None)) is not None:
        await provider.aclose()
    if (stores := ctx.pop("stores", None)) is not None:
        await stores.close()


def _arq_job(name: str) -> WorkerCoroutine:
    """The arq function for one job: named for it, running the same typed job the
    embedded runner runs."""

    async def job(ctx: dict[str, Any], arg: str) -> None:
        jobs: MemoryJobs = ctx["jobs"]
        await JOBS[name](jobs, arg)

    job.__qualname__ = job.__name__ = name
    # arq's protocol takes any arguments; ours is exactly the one the queue sends.
    return cast(WorkerCoroutine, job)


async def sweep(ctx: dict[str, Any]) -> None:
    jobs: MemoryJobs = ctx["jobs"]
    await jobs.sweep()


async def healthy(settings: Settings) -> bool:
    """Whether a worker has said it is alive lately (arq's health key, which a worker
    renews every HEALTH_CHECK_SECONDS and which lapses soon after)."""
    assert settings.redis_url is not None  # `parley worker` refuses to run without it
    found = await async_check_health(
        RedisSettings.from_dsn(settings.redis_url), queue_name=QUEUE_NAME
    )
    return found == 0


def run_worker(settings: Settings) -> None:
    """`parley worker`: arq, started again with backoff whenever Redis goes away, until
    SIGINT or SIGTERM. A supervisor still belongs in production; an outage of seconds
    should not need it."""
    asyncio.run(_supervise(settings))


async def _supervise(settings: Settings) -> None:
    metrics = Metrics()  # one for the process: its counts go on across reconnections
    server = _serve_metrics(settings, metrics)
    try:
        await _run_until_stopped(settings, metrics)
    finally:
        if server is not None:
            server.shutdown()


def _serve_metrics(settings: Settings, metrics: Metrics) -> WSGIServer | None:
    """The worker's own /metrics (a thread of prometheus-client's), when a port is set."""
    if settings.worker_metrics_port is None:
        return None
    server, _ = start_http_server(
        settings.worker_metrics_port, addr=settings.host, registry=metrics.registry
    )
    log.info("worker metrics served", host=settings.host, port=settings.worker_metrics_port)
    return server


async def _run_until_stopped(settings: Settings, metrics: Metrics) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    failures = 0
    while not stop.is_set():
        worker = build_worker(settings, handle_signals=False, metrics=metrics)
        started = loop.time()
        run = asyncio.create_task(worker.async_run())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({run, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        await _close(worker)
        if stop.is_set() or run.cancelled():
            return
        error = run.exception()
        if error is None:
            return
        if not isinstance(error, REDIS_DOWN):
            raise error
        # A worker that ran a while before Redis went away starts the backoff afresh.
        failures = 1 if loop.time() - started > RECONNECT_MAX_SECONDS else failures + 1
        delay = full_jitter(failures, RECONNECT_BASE_SECONDS, RECONNECT_MAX_SECONDS)
        log.warning("Redis is unreachable; the worker reconnects", retry_in=delay, error=str(error))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


async def _close(worker: Worker) -> None:
    # Closing talks to Redis, which may be the thing that is gone.
    with contextlib.suppress(*REDIS_DOWN, asyncio.CancelledError):
        await worker.close()
    await _shutdown(worker.ctx)


def build_worker(
    settings: Settings,
    *,
    burst: bool = False,
    poll_delay: float = 0.5,
    handle_signals: bool | None = None,
    metrics: Metrics | None = None,
) -> Worker:
    if not settings.redis_url:
        raise ValueError("PARLEY_REDIS_URL is required for `parley worker`")
    return Worker(
        functions=[
            func(_arq_job(name), name=name, max_tries=1, timeout=JOB_TIMEOUT_SECONDS)
            for name in JOBS
        ],
        cron_jobs=[cron(sweep, second=SWEEP_SECONDS, run_at_startup=True, unique=True)],
        redis_settings=RedisSettings.from_dsn(settings.redis_url),
        queue_name=QUEUE_NAME,
        on_startup=_startup,
        on_shutdown=_shutdown,
        ctx={"settings": settings, "metrics": metrics or Metrics()},
        keep_result=0,
        health_check_interval=HEALTH_CHECK_SECONDS,
        max_jobs=settings.embedded_job_concurrency * 2,
        burst=burst,
        poll_delay=poll_delay,
        handle_signals=not burst if handle_signals is None else handle_signals,
    )
