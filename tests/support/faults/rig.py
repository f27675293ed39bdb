"""The rig: the fakes, Redis, `parley serve` and the workers started; then the traffic
driven through the kills, the system left to settle, and what it stored checked."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.archive.numbers import MemoryLimits
from memory.storage.engine import create_engine
from tests.fakes.telegram_api import FakeTelegram
from tests.support.faults.checks import (
    answered_twice,
    check_archive,
    check_sends,
    lost_and_doubled,
    unanswered,
)
from tests.support.faults.fakes import ModelScript, fake_model, fake_telegram, model_url
from tests.support.faults.kills import Kill, Killer
from tests.support.faults.logs import digest
from tests.support.faults.plan import FaultPlan
from tests.support.faults.processes import Child, Processes, RedisServer, Stopwatch
from tests.support.faults.report import Report
from tests.support.faults.settings import child_settings, limits_of
from tests.support.faults.snapshot import Snapshot, snapshot
from tests.support.faults.traffic import Inbound, Traffic
from tests.support.polling import eventually
from tests.support.process import REPO, free_port, parley_env


@dataclass
class Rig:
    plan: FaultPlan
    stopwatch: Stopwatch
    processes: Processes
    script: ModelScript
    telegram: FakeTelegram
    engine: AsyncEngine
    limits: MemoryLimits
    gateways: list[httpx.AsyncClient]  # one to each `parley serve`
    sent: list[Inbound] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # by phase
    settled: bool = False

    async def drive(self) -> None:
        """Send all traffic while killing serve, the workers and Redis."""
        traffic = Traffic(self.gateways, self.plan)
        killer = Killer(
            plan=self.plan,
            stopwatch=self.stopwatch,
            processes=self.processes,
            traffic=traffic,
            script=self.script,
            telegram=self.telegram,
            engine=self.engine,
        )
        started = self.stopwatch()

        async def run_traffic() -> None:
            await traffic.run()
            self.seconds["traffic"] = self.stopwatch() - started

        async with asyncio.timeout(self.plan.drive_seconds), asyncio.TaskGroup() as tasks:
            tasks.create_task(run_traffic())
            tasks.create_task(killer.run())
        self.sent, self.kills = traffic.sent, killer.kills
        self.seconds["drive"] = self.stopwatch() - started

    async def settle(self, seconds: float) -> None:
        """Until every turn, delivery and archive job is done, or `seconds` have passed."""
        started = self.stopwatch()
        await self.processes.start_dead()
        try:
            await eventually(
                partial(snapshot, self.engine), until=self._quiet, seconds=seconds, interval=0.5
            )
            self.settled = True
        except TimeoutError:
            self.settled = False
        self.seconds["settle"] = self.stopwatch() - started

    def _quiet(self, snap: Snapshot) -> bool:
        archive = check_archive(snap.chunks, self.limits)
        sends = check_sends(self.telegram, snap)
        return not (
            unanswered(snap)
            or archive.not_ready
            or archive.facts_missing
            or archive.rollups_due
            or sends.not_recorded
            or sends.never_sent
        )

    async def report(self) -> Report:
        snap = await snapshot(self.engine)
        lost, doubled = lost_and_doubled(self.sent, snap)
        children = self.processes.children
        return Report(
            seed=self.plan.seed,
            seconds=dict(self.seconds),
            settled=self.settled,
            sent=self.sent,
            kills=self.kills,
            lost=lost,
            stored_twice=doubled,
            unacknowledged=[f"{s.channel} {s.label}" for s in self.sent if not s.acknowledged],
            unanswered=unanswered(snap),
            answered_twice=answered_twice(snap),
            archive=check_archive(snap.chunks, self.limits),
            sends=check_sends(self.telegram, snap),
            unexpected_exits=[e for c in children for e in c.unexpected_exits],
            failed_starts=[f"{c.name}: {f}" for c in children for f in c.failed_starts],
            model_calls=Counter(self.script.calls),
        )

    def logs(self) -> str:
        """The children's logs in brief (they stay readable after the rig is gone)."""
        return digest(c.log for c in self.processes.children)


@contextlib.asynccontextmanager
async def fault_rig(database_url: str, directory: Path, plan: FaultPlan) -> AsyncIterator[Rig]:
    """Everything up: fake model and Telegram, Redis, `parley serve` and the workers."""
    stopwatch = Stopwatch()
    script = ModelScript()
    data_dir = directory / "data"
    data_dir.mkdir()
    ports = [free_port() for _ in range(plan.replicas)]
    async with contextlib.AsyncExitStack() as stack:
        engine = create_engine(database_url)
        stack.push_async_callback(engine.dispose)
        llm = await stack.enter_async_context(fake_model(script))
        telegram = await stack.enter_async_context(fake_telegram())
        redis = RedisServer(directory, stopwatch)
        await redis.start()
        stack.push_async_callback(redis.kill)
        values = child_settings(
            data_dir=data_dir,
            database_url=database_url,
            redis_url=redis.url,
            port=ports[0],
            telegram=telegram,
        )
        urls = [f"http://127.0.0.1:{port}" for port in ports]

        def child(name: str, command: str, health_url: str | None = None, **own: str) -> Child:
            env = parley_env(**(values | own), llm_base_url=model_url(llm, name))
            env["PYTHONPATH"] = str(REPO)  # the code beside these tests, whatever is installed
            made = Child(
                name, command, env=env, cwd=directory, stopwatch=stopwatch, health_url=health_url
            )
            stack.push_async_callback(made.close)
            return made

        serves = [
            child(
                "serve" if plan.replicas == 1 else f"serve{i}",
                "serve",
                f"{url}/healthz",
                port=str(port),
                data_dir=str(data_dir / f"serve{i}"),
            )
            for i, (port, url) in enumerate(zip(ports, urls, strict=True))
        ]
        workers = [child(f"worker{i}", "worker") for i in range(plan.workers)]
        processes = Processes(redis, serves, workers)
        await processes.start_dead()
        gateways = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=15))
            for url in urls
        ]
        yield Rig(plan, stopwatch, processes, script, telegram, engine, limits_of(values), gateways)
