"""The kills: `parley serve`, the workers and Redis, each at the plan's moments of the
traffic's progress; half of those in the traffic aimed at a model call in flight."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fakes.telegram_api import FakeTelegram
from tests.support.faults.checks import unrecorded_sends
from tests.support.faults.fakes import ModelScript
from tests.support.faults.plan import FaultPlan
from tests.support.faults.processes import Child, Processes, Stopwatch
from tests.support.faults.snapshot import Snapshot, snapshot
from tests.support.faults.traffic import Traffic
from tests.support.polling import eventually

# What the aimed worker kills wait for, in turn.
WORKER_AIMS = (("summary",), ("extract",), ("summary",))


@dataclass(frozen=True)
class Kill:
    at: float
    progress: int  # messages done by then
    target: str
    aimed: bool = False  # meant for a model call in flight
    landed: bool = False  # the model call was in flight at the kill
    uncertain_sends: tuple[str, ...] = ()  # serve: parts Telegram took, not recorded

    def brief(self) -> str:
        """`serve@12.3s/40*`: at 12.3 s, 40 messages done; * aimed and landed in a model
        call, ? aimed and missed; ! per part Telegram took that the gateway had not
        recorded (a kill inside a send)."""
        mark = ("*" if self.landed else "?") if self.aimed else ""
        return (
            f"{self.target}@{self.at:.1f}s/{self.progress}{mark}{'!' * len(self.uncertain_sends)}"
        )


@dataclass
class Killer:
    plan: FaultPlan
    stopwatch: Stopwatch
    processes: Processes
    traffic: Traffic
    script: ModelScript
    telegram: FakeTelegram
    engine: AsyncEngine
    kills: list[Kill] = field(default_factory=list)
    taken: Counter[str] = field(default_factory=Counter)  # by text, at the last serve kill

    async def run(self) -> None:
        # Late worker kills follow the last Redis outage (see FaultPlan).
        redis_done = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            serves = self.processes.serves
            for index, serve in enumerate(serves):  # each replica on its own schedule
                rng = self.plan.rng("serve" if len(serves) == 1 else f"serve{index}")
                tasks.create_task(
                    self._kill_serve(serve, rng, self.plan.serve_kills // len(serves))
                )
            tasks.create_task(self._kill_workers(self.plan.rng("workers"), redis_done))
            tasks.create_task(self._kill_redis(self.plan.rng("redis"), redis_done))

    async def _kill_serve(self, serve: Child, rng: random.Random, count: int) -> None:
        plan = self.plan
        moments = plan.moments(rng, count, plan.serve_window)
        for moment, aimed in zip(moments, plan.aims(rng, count), strict=True):
            await self._near(moment, rng)
            kill = await self._kill(serve, ("chat",) if aimed else (), only_it=True)
            # Dead now: what Telegram took that it had not recorded will go out again.
            uncertain = await self._unrecorded_sends()
            self.kills.append(replace(kill, uncertain_sends=tuple(sorted(uncertain))))
            await serve.start()

    async def _kill_workers(self, rng: random.Random, redis_done: asyncio.Event) -> None:
        plan, workers = self.plan, self.processes.workers
        moments = plan.moments(rng, plan.worker_kills, plan.worker_window)
        kinds = itertools.cycle(WORKER_AIMS)
        for moment, aimed in zip(moments, plan.aims(rng, plan.worker_kills), strict=True):
            await self._near(moment, rng)
            self.kills.append(await self._kill(rng.choice(workers), next(kinds) if aimed else ()))
            await self.processes.start_dead(workers)
        await redis_done.wait()
        for _ in range(plan.late_worker_kills):
            await asyncio.sleep(rng.uniform(*plan.late_worker_gap))
            self.kills.append(await self._kill(rng.choice(workers), ("extract",)))
            await self.processes.start_dead(workers)

    async def _kill_redis(self, rng: random.Random, done: asyncio.Event) -> None:
        for window in self.plan.redis_windows:
            (moment,) = self.plan.moments(rng, 1, window)
            await self._near(moment, rng)
            await self._redis_outage(rng)
        # The last outage, between everyone's last two messages (see FaultPlan).
        await self.traffic.before_last_round()
        with contextlib.suppress(TimeoutError):
            await eventually(
                partial(snapshot, self.engine),
                until=_turns_and_summaries_done,
                seconds=15,
                interval=0.2,
            )
        await self._redis_outage(rng, while_down=self.traffic.open_last_round)
        done.set()

    async def _near(self, moment: int, rng: random.Random) -> None:
        await self.traffic.progress.reached(moment)
        await asyncio.sleep(rng.uniform(*self.plan.kill_delay))  # a random moment near it

    async def _kill(self, default: Child, kinds: tuple[str, ...], *, only_it: bool = False) -> Kill:
        """Kill `default`; or, aimed (`kinds` given), whichever child (`default` only, with
        `only_it`) makes the next model call of `kinds`, while that call is held open (if
        none comes, `default`)."""
        if not kinds:
            await default.kill()
            return self._kill_of(default.name)
        callers = [default.name] if only_it else None
        async with self.script.trap(kinds, callers) as trap:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.plan.trap_seconds):
                    await trap.sprung.wait()
            victim = self.processes.named(trap.caller) or default
            await victim.kill()
        return self._kill_of(victim.name, aimed=True, landed=trap.caller is not None)

    async def _redis_outage(
        self, rng: random.Random, while_down: Callable[[], None] = lambda: None
    ) -> None:
        await self.processes.redis.kill()
        self.kills.append(self._kill_of("redis"))
        while_down()
        await asyncio.sleep(rng.uniform(*self.plan.redis_down))  # the outage's length
        await self.processes.redis.start()

    def _kill_of(self, target: str, *, aimed: bool = False, landed: bool = False) -> Kill:
        """The record of a kill of `target` just now."""
        return Kill(self.stopwatch(), self.traffic.progress.count, target, aimed, landed)

    async def _unrecorded_sends(self) -> set[str]:
        """Reply texts Telegram took since the last serve kill that the (dead) gateway had
        not recorded as sent. A reply may be taken again after each kill, so one reply can
        be uncertain at several kills."""
        telegram = self.telegram

        async def in_flight() -> int:  # sends the fake is still answering
            return len(telegram.calls_of("sendMessage")) - len(telegram.sent())

        with contextlib.suppress(TimeoutError):
            await eventually(in_flight, until=lambda n: n == 0, seconds=2)
        snap = await snapshot(self.engine)  # final: the gateway is dead
        taken = Counter(telegram.texts())  # read after: nothing is missed
        again = [text for text, n in taken.items() if n > self.taken[text]]
        self.taken = taken
        return unrecorded_sends(again, snap)


def _turns_and_summaries_done(snap: Snapshot) -> bool:
    pending = [c for c in snap.chunks if c.level == 0 and c.status != "ready"]
    return not snap.owing and not pending
