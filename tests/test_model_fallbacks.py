"""A second model when the first fails (PARLEY_LLM_FALLBACKS, DESIGN §12), against two
fake model servers: the main one down in each way it goes down (503, 429, refused
connections, a stream cut mid-way, Anthropic's overload), the fallback answers, and the
person sees one coherent reply; which model wrote it is stored and shown; work that
shows nothing while it is written falls back too; a bad entry stops the start naming
its place, never its key."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.llm.base import Prompt, complete
from gateway.llm.fallback import ModelChain
from gateway.settings import load_settings
from gateway.turns.answering import MODEL_REST
from memory.chat_turn import ChatTurn
from tests.fakes.llm_server import Behaviour, Fail, FailMidStream, FakeLLM, Reply, fake_llm
from tests.support.clock import ManualClock
from tests.support.harness import ADMIN_TOKEN, Gateway, make_settings, next_frame, running_gateway
from tests.support.process import free_port
from tests.support.providers import provider

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
BACKUP_KEY = "sk-backup-key-that-must-not-leak"
ANSWER = "The tides follow the Moon; two highs a day on most coasts."


@pytest.fixture
async def backup() -> AsyncIterator[FakeLLM]:
    async with fake_llm() as fake:
        yield fake


def _fallbacks(backup: FakeLLM) -> str:
    entry = {"provider": "openai", "base_url": backup.openai_base, "model": "backup-model"}
    return json.dumps([entry | {"api_key": BACKUP_KEY}])


# The main model's failures, each as many times as it is tried (one try and two retries).
DOWN: dict[str, tuple[dict[str, Any], list[Behaviour]]] = {
    "503": ({}, [Fail(503)] * 3),
    "429": ({}, [Fail(429, retry_after=0)] * 3),
    "overloaded (Anthropic)": (
        {"llm_provider": "anthropic"},
        [Fail(529, message="Overloaded")] * 3,
    ),
}


@pytest.mark.parametrize("failure", list(DOWN))
async def test_the_next_model_answers_when_the_main_one_is_down(
    database_url: str, tmp_path: Path, llm: FakeLLM, backup: FakeLLM, failure: str
) -> None:
    extra, failures = DOWN[failure]
    if extra.get("llm_provider") == "anthropic":
        extra = extra | {"llm_base_url": llm.base_url}
    llm.script(*failures)
    backup.script(Reply(ANSWER))
    settings = make_settings(database_url, tmp_path, llm, llm_fallbacks=_fallbacks(backup), **extra)
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        answered = await gw.send(token, "why are there two tides?")
        reply, status = await _reply_and_status(gw, token)

    assert answered.status_code == 200, answered.text
    assert reply["text"] == ANSWER
    assert reply["model"] == "backup-model"
    assert len(llm.requests) == 3  # the main model had its retries first
    assert len(backup.requests) == 1
    assert "Last reply written by: backup-model." in status


async def test_a_main_model_that_refuses_connections_hands_over(
    database_url: str, tmp_path: Path, llm: FakeLLM, backup: FakeLLM
) -> None:
    backup.script(Reply(ANSWER))
    settings = make_settings(
        database_url,
        tmp_path,
        llm,
        llm_base_url=f"http://127.0.0.1:{free_port()}/v1",  # nothing listens there
        llm_fallbacks=_fallbacks(backup),
    )
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        answered = await gw.send(token, "are you there?")

    assert answered.json()["reply"]["text"] == ANSWER


async def test_a_reply_cut_mid_way_is_withdrawn_and_written_again_by_the_next_model(
    database_url: str, tmp_path: Path, llm: FakeLLM, backup: FakeLLM
) -> None:
    # Long enough to be shown as an answer (a shorter start is held back in case it
    # turns out to be the preamble of a tool call).
    half = "Half an answer from the first model, clearly an answer already. " * 6
    llm.script(FailMidStream(half))
    backup.script(Reply(ANSWER, pieces=4))
    settings = make_settings(database_url, tmp_path, llm, llm_fallbacks=_fallbacks(backup))
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        async with gw.socket(token) as websocket:
            await gw.send(token, "tell me about tides")
            frames: list[dict[str, Any]] = []
            while not (
                frames and frames[-1]["type"] == "message" and frames[-1]["role"] == "assistant"
            ):
                frames.append(await next_frame(websocket))
        history = await gw.history(token)

    shown = [f for f in frames if f["type"] in ("typing", "delta")]
    withdrawn = max(i for i, f in enumerate(shown) if f["type"] == "typing")
    before = "".join(f["text"] for f in shown[:withdrawn] if f["type"] == "delta")
    after = "".join(f["text"] for f in shown[withdrawn:] if f["type"] == "delta")
    # The first model's text streamed, then a `typing` frame withdrew it, then only the
    # second model's: a client shows what follows the last `typing`.
    assert before.strip() == half.strip()
    assert after == ANSWER
    assert [m["text"] for m in history if m["role"] == "assistant"] == [ANSWER]


async def test_background_work_falls_back_and_never_mixes_two_replies(
    llm: FakeLLM, backup: FakeLLM
) -> None:
    llm.script(FailMidStream("a summary that breaks off"))
    backup.script(Reply("the whole summary, from the second model"))
    async with provider("openai", llm) as main, provider("openai", backup) as second:
        chain = ModelChain([main, second])
        written = await complete(chain, _prompt())

    assert written == "the whole summary, from the second model"


def test_a_bad_fallback_entry_stops_the_start_naming_its_place_and_not_its_key(
    tmp_path: Path,
) -> None:
    entries = [
        {"provider": "openai", "model": "fine", "api_key": "sk-first-secret-key"},
        {"provider": "anthropic", "model": "claude", "base_url": "ftp://nowhere"},
    ]
    with pytest.raises(ConfigError) as refused:
        load_settings(_env_file=None, data_dir=tmp_path, llm_fallbacks=json.dumps(entries))

    message = str(refused.value)
    assert "PARLEY_LLM_FALLBACKS (entry 1" in message
    assert "sk-first-secret-key" not in message
    with pytest.raises(ConfigError, match="must be a JSON list"):
        load_settings(_env_file=None, data_dir=tmp_path, llm_fallbacks='{"provider": "x"}')


async def _reply_and_status(gw: Gateway, token: str) -> tuple[dict[str, Any], str]:
    sessions = (await gw.http.get("/api/v1/sessions", headers=ADMIN)).json()["items"]
    url = f"/api/v1/sessions/{sessions[0]['id']}/messages"
    messages = (await gw.http.get(url, headers=ADMIN)).json()["items"]
    reply = next(m for m in messages if m["role"] == "assistant")
    status = await gw.send(token, "/status")
    return reply, status.json()["reply"]["text"]


def _prompt() -> Prompt:
    return Prompt("Summarise.", (ChatTurn("user", "what was said"),), max_tokens=64)


async def test_a_failed_model_rests_so_the_next_turns_go_straight_to_the_one_that_works(
    database_url: str, tmp_path: Path, llm: FakeLLM, backup: FakeLLM
) -> None:
    clock = ManualClock(datetime(2026, 12, 5, 12, 0, tzinfo=UTC))
    llm.script(*[Fail(503)] * 3, Reply("the main model, back again"))
    backup.script(Reply("first, from the backup"), Reply("second, from the backup"))
    settings = make_settings(database_url, tmp_path, llm, llm_fallbacks=_fallbacks(backup))
    async with running_gateway(settings, clock=clock) as gw:
        token, _ = await gw.visitor()
        first = (await gw.send(token, "one")).json()["reply"]["text"]
        second = (await gw.send(token, "two")).json()["reply"]["text"]
        asked_while_resting = len(llm.requests)
        clock.advance(MODEL_REST + timedelta(seconds=1))
        third = (await gw.send(token, "three")).json()["reply"]["text"]

    assert [first, second, third] == [
        "first, from the backup",
        "second, from the backup",  # the main model was not asked again meanwhile
        "the main model, back again",
    ]
    assert asked_while_resting == 3
