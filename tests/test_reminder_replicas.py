"""Every due time fires exactly once across two replicas, one killed with SIGKILL while
reminders come due (DESIGN §9): none is lost, none is sent twice.

Replica A is a `parley serve` process; replica B a gateway in this process; both on one
Postgres database and one Redis, sweeping for due reminders every 0.2 s (one replica at
a time, by a lease that lapses 0.6 s after its holder last swept). A takes the sweep
first; forty reminders come due over the next seconds; once A has fired some, it is
killed, and B finishes: the sweep's lease, the turns A left unanswered, all of it.
"""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Select, func, select

from gateway.reminders.planner import BY_OPERATOR, Ask, Planner
from memory.storage.engine import create_engine, session_factory
from memory.storage.models import Message, Role, Schedule, ScheduleFire
from tests.support.harness import make_settings, running_gateway
from tests.support.polling import eventually
from tests.support.process import REPO, free_port, parley_env, start_parley, stop_process

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)

REMINDERS = 40
FAST = {
    "reminder_sweep_seconds": 0.2,
    "sweep_interval_seconds": 0.5,
    "turn_lease_seconds": 3,
}


async def _count(database_url: str, query: Select[Any]) -> int:
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as session:
            return int(await session.scalar(query) or 0)
    finally:
        await engine.dispose()


async def test_due_times_fire_exactly_once_when_a_replica_is_killed_among_them(
    database_url: str, tmp_path: Path, redis_url: str
) -> None:
    port = free_port()
    env = parley_env(
        database_url=database_url,
        redis_url=redis_url,
        data_dir=str(tmp_path / "doomed"),
        port=str(port),
        **{key: str(value) for key, value in FAST.items()},
    )
    doomed = await start_parley("serve", env=env, cwd=REPO)
    fired = select(func.count()).select_from(ScheduleFire)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as a:
            await eventually(lambda: _ready(a), until=bool, seconds=30)
            # A has swept (and holds the sweep's lease) before B starts.
            session = (await a.post("/webchat/sessions")).json()
            token, conversation = session["token"], uuid.UUID(session["conversation_id"])
            said = await a.post(
                "/webchat/messages",
                json={"text": "hello"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert said.status_code == 200, said.text
        settings = make_settings(database_url, tmp_path / "survivor", None, **FAST)
        settings = settings.model_copy(update={"redis_url": redis_url})
        async with running_gateway(settings) as b:
            planner = Planner(b.services.repos.schedules, b.services.clock, follow_ups_per_day=2)
            for n in range(REMINDERS):
                # Due 2 to 9 seconds from now, several in the same second.
                await planner.create(
                    conversation,
                    Ask(f"PT{2 + n * 7 // REMINDERS}S", f"thing {n}"),
                    timezone="UTC",
                    by=BY_OPERATOR,
                    user_id=None,
                )
            await eventually(
                lambda: _count(database_url, fired), until=lambda n: n >= 3, seconds=30
            )
            doomed.send_signal(signal.SIGKILL)
            await doomed.wait()
            before_kill = await _count(database_url, fired)
            await eventually(
                lambda: _count(database_url, fired), until=lambda n: n == REMINDERS, seconds=60
            )
            history = await eventually(
                lambda: b.whole_history(token),
                until=lambda h: len(_reminded(h)) >= REMINDERS,
                seconds=60,
            )
            engine = create_engine(database_url)
            try:
                async with session_factory(engine)() as db:
                    per_schedule = Counter(
                        (await db.scalars(select(ScheduleFire.schedule_id))).all()
                    )
                    schedules = (await db.scalars(select(Schedule.id))).all()
                    firings = (
                        await db.scalars(
                            select(Message.text).where(
                                Message.conversation_id == conversation,
                                Message.role == Role.USER,
                                Message.source.is_not(None),
                            )
                        )
                    ).all()
            finally:
                await engine.dispose()
    finally:
        await stop_process(doomed, signal.SIGKILL)

    assert 3 <= before_kill < REMINDERS  # A fired some, B the rest
    assert sorted(per_schedule) == sorted(schedules)
    assert set(per_schedule.values()) == {1}  # every due time once
    wanted = sorted(f"Reminder: thing {n}" for n in range(REMINDERS))
    assert sorted(firings) == wanted  # each in the conversation once
    assert sorted(_reminded(history)) == wanted  # answered once (no model: its own words)


def _reminded(history: list[dict[str, Any]]) -> list[str]:
    """The reminders the replies sent (a turn answers every reminder due meanwhile
    at once: one reply may carry several, a paragraph each)."""
    return [
        part
        for m in history
        if m["role"] == "assistant"
        for part in m["text"].split("\n\n")
        if part.startswith("Reminder:")
    ]


async def _ready(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/readyz")).status_code == 200
    except httpx.TransportError:
        return False
