"""Faults cost seconds, never answers (issues 9 and 12).

`parley serve` and two `parley worker`s on Postgres and a private Redis take Telegram
webhooks (retried until acknowledged, some redelivered) and web chat messages while the
gateway is SIGKILLed 22 times, a worker 12 times (half of those kills while a model call
is in flight) and Redis is killed and restarted empty 3 times. Then, from the database
and the fake Telegram's records: nothing lost, nothing stored twice, everything answered
once, every archive job done and the archive well formed, and each reply sent once —
except where a kill fell between Telegram taking a message and the gateway recording it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import databases
from tests.support.faults.plan import FaultPlan
from tests.support.faults.report import Report
from tests.support.faults.rig import Rig, fault_rig

pytestmark = pytest.mark.faults

SEED = int(os.environ.get("PARLEY_TEST_FAULT_SEED", "9"))
SETTLE_SECONDS = 60.0


@pytest.fixture
def private_postgres() -> Iterator[str]:
    """A migrated Postgres database of this test's own, dropped afterwards."""
    yield from databases.postgres_database()


@pytest.mark.postgres
@pytest.mark.timeout(330)
async def test_faults_cost_seconds_never_answers(private_postgres: str, tmp_path: Path) -> None:
    async with fault_rig(private_postgres, tmp_path, FaultPlan(seed=SEED)) as rig:
        await rig.drive()
        await rig.settle(seconds=SETTLE_SECONDS)
        report = await rig.report()

    print(report.render())
    assert len(report.kills_of("serve")) >= 20
    assert len(report.kills_of("worker")) >= 10
    assert len(report.kills_of("redis")) >= 3
    assert sum(k.landed for k in report.kills) >= 10  # kills during a model call
    assert max(report.archive.per_level) >= 2  # chunks were cut, consolidated, rolled up
    _assert_nothing_lost_doubled_or_unanswered(report, rig)


@pytest.mark.postgres
@pytest.mark.timeout(400)
async def test_faults_across_two_replicas_cost_seconds_never_answers(
    private_postgres: str, tmp_path: Path
) -> None:
    """The same, with traffic to two `parley serve` replicas (each attempt to the next,
    as a load balancer would) while each is killed 22 times."""
    plan = FaultPlan(seed=SEED, replicas=2, serve_kills=44, worker_kills=16)
    async with fault_rig(private_postgres, tmp_path, plan) as rig:
        await rig.drive()
        await rig.settle(seconds=SETTLE_SECONDS)
        report = await rig.report()

    print(report.render())
    assert len(report.kills_of("serve0")) >= 20
    assert len(report.kills_of("serve1")) >= 20
    assert len(report.kills_of("worker")) >= 20
    assert len(report.kills_of("redis")) >= 3
    assert sum(k.landed for k in report.kills) >= 10  # kills during a model call
    _assert_nothing_lost_doubled_or_unanswered(report, rig)


def _assert_nothing_lost_doubled_or_unanswered(report: Report, rig: Rig) -> None:
    found = report.problems()
    if found:
        print(rig.logs())  # the children's logs outlive the rig
    assert not found, "\n".join(
        f"{name} ({len(items)}): {items[:10]}" for name, items in found.items()
    )
