"""Tidying a profile by edits against a real database and a fake model server:
untouched lines stay, retired lines are kept, bad answers change nothing, failures
back off 1 h / 6 h / 24 h, and a tidy is at most two passes."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.jobs.memory_jobs import ProviderTextModel
from gateway.llm.openai import OpenAIProvider
from memory.archive.archive import Archive
from memory.archive.numbers import MemoryLimits
from memory.profile.facts import Evidence, Fact, Remove, StaleRevision
from memory.profile.profiles import Profiles
from memory.profile.upkeep import ProfileJobs, ProfileLimits
from memory.storage.engine import create_engine, session_factory
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens
from tests.fakes.llm_server import Behaviour, FakeLLM, Reply
from tests.support.clock import ManualClock

LIMITS = ProfileLimits(tidy_at_chars=4_000, tidy_target_chars=3_000, regrow_chars=500)
HOUR = timedelta(hours=1)


@dataclass
class Env:
    engine: AsyncEngine
    profiles: Profiles
    jobs: ProfileJobs
    clock: ManualClock
    user: uuid.UUID
    queued: list[tuple[str, str]] = field(default_factory=list)


@pytest.fixture
async def env(database_url: str, llm: FakeLLM) -> AsyncIterator[Env]:
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    repos = Repositories.open(sessions, count_tokens=message_tokens, now=lambda: datetime.now(UTC))
    clock = ManualClock(datetime(2026, 5, 4, 12, 0, tzinfo=UTC))
    provider = OpenAIProvider(
        base_url=llm.openai_base,
        api_key=None,
        model="m",
        timeout=10,
        max_retries=0,
        retry_base_seconds=0,
    )
    queued: list[tuple[str, str]] = []

    async def enqueue(job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
        queued.append((job, arg))

    profiles = Profiles(sessions)
    jobs = ProfileJobs(
        profiles=profiles,
        archive=Archive(sessions, MemoryLimits()),
        messages=repos.messages,
        conversations=repos.conversations,
        model=ProviderTextModel(provider, None),
        enqueue=enqueue,
        now=clock.now,
        limits=LIMITS,
    )
    ref = await repos.identities.resolve_identity(
        "webchat", uuid.uuid4().hex, display_name="Ann", timezone="UTC", now=clock.now()
    )
    try:
        yield Env(engine, profiles, jobs, clock, ref.user_id, queued)
    finally:
        await provider.aclose()
        await engine.dispose()


def _facts(count: int, size: int = 100) -> list[Fact]:
    """Facts from typed messages, fact n from message n + 1 of chunk n + 1."""
    when = datetime(2026, 11, 1, tzinfo=UTC)
    return [
        Fact(f"fact {n:03d} " + "x" * (size - 9), (Evidence(n + 1, (n + 1,), when),))
        for n in range(count)
    ]


def _numbered(body: dict[str, Any]) -> list[str]:
    document = json.loads(body["messages"][-1]["content"])
    return str(document["profile"]).splitlines()


def _answer(edits: list[dict[str, Any]]) -> Reply:
    return Reply(json.dumps({"edits": edits}))


async def test_tidy_keeps_untouched_lines_and_retires_every_changed_one(
    env: Env, llm: FakeLLM
) -> None:
    facts = _facts(50)  # 5,000 characters: over the 4,000 trigger
    await env.profiles.append(env.user, facts, env.clock.now(), chunk_id=None)
    llm.script(
        _answer(
            [
                {"remove": [1, 2, 3, 4, 5]},
                {"shorten": 6, "to": "fact 005 short"},
                {"replace": list(range(7, 26)), "with": "facts 6 to 24 merged"},
            ]
        )
    )
    await env.jobs.tidy(env.user)
    profile = await env.profiles.get(env.user)
    retired = await env.profiles.retired(env.user)

    texts = [fact.text for fact in facts]
    assert len(llm.requests) == 1  # 2,540 characters left: under the target, one pass
    assert _numbered(llm.requests[0])[0] == f"1. {texts[0]}"
    assert list(profile.lines) == ["fact 005 short", "facts 6 to 24 merged", *texts[25:]]
    # Evidence goes with the lines: kept, shortened (the same), merged (the union).
    assert profile.facts[2:] == facts[25:]
    assert profile.sources[0] == facts[5].sources
    assert profile.sources[1] == tuple(e for f in facts[6:25] for e in f.sources)
    assert [(r.text, r.reason, r.sources) for r in retired] == [
        *[(f.text, "removed", f.sources) for f in facts[:5]],
        (facts[5].text, "shortened", facts[5].sources),
        *[(f.text, "replaced", f.sources) for f in facts[6:25]],
    ]
    assert await env.profiles.retired(env.user, "fact 003") == [retired[3]]


async def test_a_tidy_makes_at_most_two_passes(env: Env, llm: FakeLLM) -> None:
    await env.profiles.append(env.user, _facts(60), env.clock.now(), chunk_id=None)

    def one_line_at_a_time(body: dict[str, Any], number: int) -> Behaviour | None:
        return _answer([{"remove": [1]}])

    llm.responder = one_line_at_a_time
    await env.jobs.tidy(env.user)
    assert len(llm.requests) == 2
    assert len((await env.profiles.get(env.user)).lines) == 58


@pytest.mark.parametrize(
    "bad",
    [
        "I would remove the oldest lines.",
        '{"edits": [{"remove": [61]}]}',
        '{"edits": [{"remove": [1]}, {"shorten": 1, "to": "x"}]}',
        '{"edits": [{"shorten": 2, "to": "a much, much longer line than the one it replaces '
        + "y" * 200
        + '"}]}',
        # An operator may correct a line with a longer one; tidying must shrink.
        '{"edits": [{"replace": [2], "with": "a much, much longer line than the one it replaces '
        + "y" * 200
        + '"}]}',
    ],
)
async def test_a_bad_answer_changes_nothing_and_backs_off(env: Env, llm: FakeLLM, bad: str) -> None:
    await env.profiles.append(env.user, _facts(60), env.clock.now(), chunk_id=None)
    before = await env.profiles.get(env.user)
    llm.responder = lambda body, number: Reply(bad)

    waits = []
    for _ in range(4):
        await env.jobs.tidy(env.user)
        calls = len(llm.requests)
        await env.jobs.tidy(env.user)  # too early: asks nobody
        assert len(llm.requests) == calls
        row_wait = await _wait(env)
        waits.append(row_wait)
        env.clock.advance(row_wait)

    assert await env.profiles.get(env.user) == before
    assert await env.profiles.retired(env.user) == []
    assert waits == [HOUR, 6 * HOUR, 24 * HOUR, 24 * HOUR]
    assert len(llm.requests) == 4


async def _wait(env: Env) -> timedelta:
    """How long until the profile may be tidied again, probed by the due check."""
    start = env.clock.now()
    for hours in range(0, 49):
        if await env.profiles.tidy_due(env.user, start + hours * HOUR, LIMITS.tidy_at_chars):
            return hours * HOUR
    raise AssertionError("never due again")


async def test_a_tidy_that_cannot_shrink_waits_for_the_profile_to_grow(
    env: Env, llm: FakeLLM
) -> None:
    await env.profiles.append(env.user, _facts(60), env.clock.now(), chunk_id=None)
    llm.responder = lambda body, number: _answer([])  # the model keeps everything

    await env.jobs.tidy(env.user)
    assert len(llm.requests) == 2
    env.clock.advance(48 * HOUR)
    await env.jobs.tidy(env.user)  # a restart, a day later: still nothing to ask
    assert len(llm.requests) == 2
    assert await env.jobs.sweep() == 0

    await env.profiles.append(env.user, _facts(6, 101), env.clock.now(), chunk_id=None)
    await env.jobs.tidy(env.user)
    assert len(llm.requests) == 4


async def test_edits_against_an_old_revision_are_refused(env: Env) -> None:
    await env.profiles.append(env.user, _facts(3), env.clock.now(), chunk_id=None)
    seen = await env.profiles.get(env.user)
    await env.profiles.append(env.user, [Fact("a newer fact")], env.clock.now(), chunk_id=None)

    with pytest.raises(StaleRevision):
        await env.profiles.edit(
            env.user, seen.revision, [Remove((1,))], env.clock.now(), by="operator"
        )
    assert (await env.profiles.get(env.user)).lines[0] == seen.lines[0]
    assert await env.profiles.retired(env.user) == []
