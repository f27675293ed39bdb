"""Running archive jobs: the queue interface and the embedded runner.

Without Redis, `parley serve` runs jobs in-process with the same job code an arq
worker runs. Either way the database is the source of truth: a periodic sweep queues
whatever is due, so a lost queue entry only delays work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from gateway.replicas.sweeps import sweep_forever

log = structlog.get_logger(__name__)


class Jobs(Protocol):
    """What a queue runs: jobs by name, and the sweep that finds work that is due."""

    async def run(self, job: str, arg: str) -> None: ...

    async def sweep(self) -> int: ...


class JobQueue(Protocol):
    async def enqueue(self, job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
        """Queue `job(arg)` unless a job with `key` is already queued or running."""
        ...

    async def start(self, jobs: Jobs) -> None:
        """Start running `jobs` (built after the queue: they enqueue through it)."""
        ...

    async def close(self) -> None: ...

    async def reachable(self) -> bool:
        """Whether the queue can take jobs now (for readiness)."""
        ...


class EmbeddedQueue:
    """Jobs as tasks of this process, at most `concurrency` at a time."""

    def __init__(
        self,
        *,
        concurrency: int,
        sweep_every: float,
        pause: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`pause`: waited for before each job, as turns wait: for a pause in the
        messages arriving (a job's work shares the loop that acknowledges them)."""
        self._pause = pause
        self._jobs: Jobs | None = None
        self._sweep_every = sweep_every
        self._slots = asyncio.Semaphore(concurrency)
        self._keys: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    async def enqueue(self, job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
        if key in self._keys:
            return
        self._keys.add(key)
        self._idle.clear()
        task = asyncio.create_task(self._run(job, arg, key, defer), name=f"job:{key}")
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def start(self, jobs: Jobs) -> None:
        self._jobs = jobs
        self._sweeper = asyncio.create_task(
            sweep_forever(jobs.sweep, self._sweep_every, name="memory jobs", at_once=True),
            name="job-sweeper",
        )

    async def close(self) -> None:
        # An interrupted job leaves its lease to expire; the next start sweeps it up.
        pending = [*self._tasks, *([self._sweeper] if self._sweeper else [])]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def reachable(self) -> bool:
        return True

    async def idle(self) -> None:
        """Wait until no job is queued or running (for tests and benchmarks)."""
        await self._idle.wait()

    async def _run(self, job: str, arg: str, key: str, defer: float) -> None:
        try:
            if defer > 0:
                await asyncio.sleep(defer)
            async with self._slots:
                assert self._jobs is not None, "start() the queue first"
                if self._pause is not None:
                    await self._pause()
                await self._jobs.run(job, arg)
        except Exception:
            log.exception("job failed", job=job, key=key)
        finally:
            self._keys.discard(key)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()
