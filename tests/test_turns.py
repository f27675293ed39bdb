"""The turn pipeline end to end: web chat API → core → storage → fake model → reply."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.fakes.llm_server import Fail, FakeLLM, Hang, Reply
from tests.support.clock import ManualClock
from tests.support.harness import Gateway, make_settings, running_gateway
from tests.support.polling import eventually


def _system(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    content: str = first["content"]
    return content


def _user_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def test_message_gets_a_stored_reply(database_url: str, tmp_path: Path, llm: FakeLLM) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        response = await gw.send(token, "hello there")

        assert response.status_code == 200, response.text
        body = response.json()
        assert body["message"] | {"created_at": None} == {
            "seq": 1,
            "role": "user",
            "text": "hello there",
            "channel": "webchat",
            "created_at": None,
            "attachments": [],
        }
        assert body["reply"]["seq"] == 2
        assert body["reply"]["role"] == "assistant"
        assert body["reply"]["text"] == "reply 1"
        assert datetime.fromisoformat(body["reply"]["created_at"]).utcoffset() == timedelta(0)
        assert [m["seq"] for m in await gw.history(token)] == [1, 2]
        assert "hello there" in _user_texts(llm.requests[0])[-1]
        assert llm.headers[0]["authorization"] == "Bearer sk-test-key-that-must-not-leak"


async def test_repeated_client_id_stores_once_and_answers_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        first = await gw.send(token, "only once", client_id="c-1")
        second = await gw.send(token, "only once", client_id="c-1")

        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()
        assert len(llm.requests) == 1
        assert [m["role"] for m in await gw.history(token)] == ["user", "assistant"]


async def test_client_ids_are_scoped_to_their_visitor(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        alice, _ = await gw.visitor()
        bob, _ = await gw.visitor()
        a = await gw.send(alice, "from alice", client_id="1")
        b = await gw.send(bob, "from bob", client_id="1")

        assert a.json()["message"]["text"] == "from alice"
        assert b.json()["message"]["text"] == "from bob"
        assert len(llm.requests) == 2


async def _wait_for_user_messages(gw: Gateway, token: str, count: int) -> None:
    await eventually(
        lambda: gw.history(token),
        until=lambda messages: sum(m["role"] == "user" for m in messages) >= count,
    )


async def test_messages_sent_during_a_turn_are_answered_together(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("first answer", gate=gate), Reply("one answer for three"))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        first = asyncio.create_task(gw.send(token, "first"))
        await llm.wait_for_requests(1)
        burst = [asyncio.create_task(gw.send(token, text)) for text in ("two", "three", "four")]
        await _wait_for_user_messages(gw, token, 4)
        gate.set()
        responses = [await first] + [await task for task in burst]

    assert len(llm.requests) == 2
    assert llm.max_active == 1
    assert responses[0].json()["reply"]["text"] == "first answer"
    later_replies = {r.json()["reply"]["seq"] for r in responses[1:]}
    assert len(later_replies) == 1
    second_call = _user_texts(llm.requests[1])
    for text in ("two", "three", "four"):
        assert any(text in content for content in second_call), text
    assert [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "assistant"] == [
        "first answer"
    ]


async def test_a_command_in_a_burst_splits_it_and_every_part_is_answered(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # The burst arrives during one turn; nothing arrives after it. Each later step must
    # know from what it read that more is owed: no new message wakes the loop, and the
    # sweep that would answer what a loop left behind is out of reach.
    gate = asyncio.Event()
    llm.script(Reply("first answer", gate=gate), Reply("answer to two"), Reply("answer to four"))
    settings = make_settings(database_url, tmp_path, llm, sweep_interval_seconds=3600)
    async with running_gateway(settings) as gw, asyncio.timeout(30):
        token, _ = await gw.visitor()
        first = asyncio.create_task(gw.send(token, "first"))
        await llm.wait_for_requests(1)
        burst = []
        for text in ("two", "/status", "four"):  # in this order
            burst.append(asyncio.create_task(gw.send(token, text)))
            await _wait_for_user_messages(gw, token, 1 + len(burst))
        gate.set()
        responses = [await first] + [await task for task in burst]

    replies = [r.json()["reply"] for r in responses]
    assert [r["text"] for r in replies[:2]] == ["first answer", "answer to two"]
    assert replies[2]["role"] == "event"  # /status, answered by the gateway
    assert replies[3]["text"] == "answer to four"
    assert len(llm.requests) == 3


async def test_concurrent_messages_get_ordered_turns_that_never_overlap(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("first", gate=gate), Reply("second"))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        alpha = asyncio.create_task(gw.send(token, "alpha"))
        await llm.wait_for_requests(1)
        # "beta" arrives while alpha's turn is still with the model.
        beta = asyncio.create_task(gw.send(token, "beta"))
        await eventually(lambda: gw.history(token), until=lambda ms: len(ms) == 2)
        gate.set()
        a, b = await alpha, await beta
        history = await gw.history(token)

    assert llm.max_active == 1
    assert (a.json()["reply"]["text"], b.json()["reply"]["text"]) == ("first", "second")
    # The second turn ran after the first: it saw alpha, beta and the answer to alpha.
    first, second = ([m["content"] for m in r["messages"][1:]] for r in llm.requests)
    assert ["alpha" in c for c in first] == [True]
    assert [c for c in second if c == "first"] == ["first"]
    assert sum("beta" in c for c in second) == 1
    assert [(m["seq"], m["text"]) for m in history] == [
        (1, "alpha"),
        (2, "beta"),
        (3, "first"),
        (4, "second"),
    ]


async def test_a_turn_waiting_on_the_model_lends_its_slot_and_slots_go_in_order(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    gate = asyncio.Event()
    llm.script(*(Reply(f"answer {n}", gate=gate) for n in range(5)))
    settings = make_settings(database_url, tmp_path, llm, turn_concurrency=1)
    async with running_gateway(settings) as gw, asyncio.timeout(30):
        visitors = [await gw.visitor() for _ in range(5)]
        sent = []
        for n, (token, _) in enumerate(visitors):
            sent.append(asyncio.create_task(gw.send(token, f"question {n}")))
            await _wait_for_user_messages(gw, token, 1)
        # One slot, yet every turn reaches the model: a slow model holds up no one.
        await llm.wait_for_requests(5)
        waiting = await _waiting(gw)
        gate.set()
        replies = [(await task).json()["reply"]["text"] for task in sent]

    assert waiting == 0
    assert llm.max_active == 5
    # The slot went to the conversations in the order they asked.
    asked = [_user_texts(r)[-1].rsplit("\n", 1)[-1] for r in llm.requests]
    assert asked == [f"question {n}" for n in range(5)]
    assert sorted(replies) == [f"answer {n}" for n in range(5)]


async def _waiting(gw: Gateway) -> float:
    metrics = (await gw.http.get("/metrics")).text
    line = next(x for x in metrics.splitlines() if x.startswith("parley_turns_waiting "))
    return float(line.split()[1])


async def test_system_prompt_is_byte_identical_for_every_call_in_a_turn(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Fail(503), Fail(500), Reply("finally"))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        response = await gw.send(token, "are you there?")

    assert response.json()["reply"]["text"] == "finally"
    assert len(llm.requests) == 3
    systems = {_system(request).encode() for request in llm.requests}
    assert len(systems) == 1


async def test_clock_context_uses_the_users_zone_and_names_long_gaps(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    clock = ManualClock(datetime(2026, 3, 10, 9, 15, tzinfo=UTC))
    settings = make_settings(database_url, tmp_path, llm, default_timezone="Europe/Berlin")
    async with running_gateway(settings, clock=clock) as gw:
        token, _ = await gw.visitor()
        await gw.send(token, "morning")
        clock.advance(timedelta(hours=2))
        await gw.send(token, "still here")
        clock.advance(timedelta(days=3, hours=4))
        await gw.send(token, "back again")

    first, soon, later = (_system(request) for request in llm.requests)
    assert "Tuesday, 10 March 2026, 10:15 (Europe/Berlin, UTC+01:00)" in first
    assert "It has been" not in first
    assert "It has been" not in soon
    assert "Friday, 13 March 2026, 16:15 (Europe/Berlin, UTC+01:00)" in later
    assert "It has been 3 days and 4 hours since the previous message" in later


async def test_model_errors_leave_a_notice_and_the_next_turn_answers(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Fail(500), Fail(500), Fail(500), Reply("back to normal"))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        token, _ = await gw.visitor()
        failed = (await gw.send(token, "question one")).json()
        recovered = (await gw.send(token, "question two")).json()
        history = await gw.history(token)

    assert failed["message"]["text"] == "question one"
    assert failed["reply"]["role"] == "event"
    assert "couldn't reach the language model" in failed["reply"]["text"]
    assert recovered["reply"] == history[-1]
    assert recovered["reply"]["text"] == "back to normal"
    assert [m["text"] for m in history if m["role"] == "user"] == ["question one", "question two"]
    last_call = _user_texts(llm.requests[-1])
    assert any("question one" in c for c in last_call)
    assert all("couldn't reach" not in c for c in last_call)


async def test_model_timeout_leaves_a_notice(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Hang(), Reply("after the hang"))
    settings = make_settings(
        database_url, tmp_path, llm, llm_timeout_seconds=0.3, llm_max_retries=0
    )
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        timed_out = (await gw.send(token, "hello?")).json()
        answered = (await gw.send(token, "hello again")).json()

    assert timed_out["reply"]["role"] == "event"
    assert answered["reply"]["text"] == "after the hang"
