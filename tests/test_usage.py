"""What the models cost (DESIGN §12): every call's tokens as the server counted them,
summed per person per day with turns apart from background work, priced with
PARLEY_LLM_PRICES, reported by GET /api/v1/usage; and a daily budget past which a
person is told once, their messages are stored, and the model is not asked."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from gateway.turns.budget import BUDGET_NOTICE
from memory.model_usage import Usage
from memory.storage.models import UsageKind
from memory.storage.usage_days import Payer
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import Behaviour, FakeLLM, Reply
from tests.support.archive_checks import marked_text, request_kind, settle_extraction
from tests.support.clock import ManualClock
from tests.support.harness import ADMIN_TOKEN, Gateway, make_settings, running_gateway
from tests.support.platforms import platform_gateway
from tests.support.world import World

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PRICES = {"fake-model": {"prompt": "3", "cached": "0.3", "completion": "15"}}
# A reply of three pieces: the fake counts a completion token per piece.
ANSWER = "abc def ghi"


@dataclass
class Reported:
    """What the fake model server said each call took, by kind of request."""

    calls: dict[str, list[Usage]]

    def respond(self, body: dict[str, Any], number: int) -> Behaviour:
        cached = number % 4  # a prompt cache that hits now and then
        kind = request_kind(body)
        # Its prompt tokens: ten, plus the cached ones.
        self.calls.setdefault(kind, []).append(Usage(10 + cached, cached, 3, "fake-model"))
        if kind == "extract":
            return Reply('{"facts": []}', pieces=3, cached=cached)
        return Reply(ANSWER, pieces=3, cached=cached)

    def of(self, *kinds: str) -> list[Usage]:
        return [call for kind in kinds for call in self.calls.get(kind, [])]


def _totals(calls: list[Usage]) -> dict[str, Any]:
    cost = sum(
        (
            (c.prompt - c.cached) * Decimal(3) + c.cached * Decimal("0.3") + c.completion * 15
            for c in calls
        ),
        Decimal(0),
    ) / Decimal(1_000_000)
    return {
        "calls": len(calls),
        "prompt_tokens": sum(c.prompt for c in calls),
        "cached_tokens": sum(c.cached for c in calls),
        "completion_tokens": sum(c.completion for c in calls),
        "cost_usd": str(round(cost, 6)),
        "unpriced_tokens": 0,
    }


async def _usage(gw: Gateway, **params: str) -> dict[str, Any]:
    response = await gw.http.get("/api/v1/usage", params=params, headers=ADMIN)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_usage_sums_what_the_servers_counted_with_turns_apart_from_background_work(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    reported = Reported({})
    llm.responder = reported.respond
    settings = make_settings(
        database_url, tmp_path, llm, llm_context_tokens=16_000, llm_prices=PRICES
    )
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        # Long messages: the oldest are archived, summarised and read for facts.
        for number in range(1, 7):
            response = await gw.send(token, marked_text(number, 600))
            assert response.json()["reply"]["text"] == ANSWER
        await settle_extraction(gw, uuid.UUID(conversation))
        user_id = str(
            (await gw.http.get(f"/api/v1/sessions/{conversation}", headers=ADMIN)).json()["user_id"]
        )
        today = datetime.now(UTC).date().isoformat()
        by_day = await _usage(gw)
        by_user = await _usage(gw, group_by="user")
        by_model = await _usage(gw, group_by="model", user_id=user_id)
        nobody = await _usage(gw, user_id=str(uuid.uuid4()))
        url = f"/api/v1/sessions/{conversation}/messages"
        messages = (await gw.http.get(url, headers=ADMIN)).json()["items"]
        export = (await gw.http.get(f"/api/v1/users/{user_id}/export", headers=ADMIN)).text

    turns, background = reported.of("chat"), reported.of("summary", "extract")
    assert len(turns) == 6
    assert background, "nothing was summarised"
    [day] = by_day["rows"]
    assert day["key"] == today
    assert day["turns"] == _totals(turns)
    assert day["background"] == _totals(background)
    assert day["total"] == _totals(turns + background)
    assert by_day["total"] == _totals(turns + background)
    [person] = by_user["rows"]
    assert (person["key"], person["group"], person["turns"]) == (user_id, False, _totals(turns))
    [model] = by_model["rows"]
    assert (model["key"], model["total"]) == ("fake-model", _totals(turns + background))
    assert nobody["rows"] == []
    # Each reply keeps what its call took, shown to operators and carried in the export.
    shown = [m["usage"] for m in messages if m["role"] == "assistant"]
    assert shown == [
        {"prompt_tokens": c.prompt, "cached_tokens": c.cached, "completion_tokens": c.completion}
        for c in turns
    ]
    exported = [json.loads(line) for line in export.splitlines()]
    assert [
        (r["usage_prompt"], r["usage_cached"], r["usage_completion"])
        for r in exported
        if r.get("type") == "message" and r.get("role") == "assistant"
    ] == [(c.prompt, c.cached, c.completion) for c in turns]


async def test_a_model_without_a_price_costs_null_and_bad_ranges_are_refused(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm)  # no prices
    async with running_gateway(settings) as gw:
        token, _ = await gw.visitor()
        await gw.send(token, "hello")
        body = await _usage(gw)
        backwards = await gw.http.get(
            "/api/v1/usage", params={"from": "2026-12-05", "to": "2026-12-01"}, headers=ADMIN
        )
        too_long = await gw.http.get(
            "/api/v1/usage", params={"from": "2024-01-01", "to": "2026-12-01"}, headers=ADMIN
        )
        unknown = await gw.http.get("/api/v1/usage", params={"group_by": "week"}, headers=ADMIN)

    [day] = body["rows"]
    assert day["turns"]["cost_usd"] is None
    assert day["turns"]["unpriced_tokens"] == day["turns"]["prompt_tokens"] + 3
    assert [r.status_code for r in (backwards, too_long, unknown)] == [422, 422, 422]
    assert "after" in backwards.json()["error"]["message"]


async def test_past_the_daily_budget_one_notice_messages_stored_no_model_until_lifted(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.responder = lambda body, number: Reply(ANSWER, pieces=3)  # 13 tokens a turn
    clock = ManualClock(datetime(2026, 12, 5, 12, 0, tzinfo=UTC))
    settings = make_settings(database_url, tmp_path, llm, daily_tokens_per_person=30)
    async with running_gateway(settings, clock=clock) as gw:
        token, conversation = await gw.visitor()
        replies = [(await gw.send(token, f"message {n}")).json()["reply"] for n in range(1, 6)]
        asked_while_spent = len(llm.requests)
        status = (await gw.send(token, "/status")).json()["reply"]["text"]
        user_id = (await gw.http.get(f"/api/v1/sessions/{conversation}", headers=ADMIN)).json()[
            "user_id"
        ]
        lifted = await gw.http.patch(
            f"/api/v1/users/{user_id}", json={"daily_tokens": 100}, headers=ADMIN
        )
        after_lifting = (await gw.send(token, "message 6")).json()["reply"]
        back = await gw.http.patch(
            f"/api/v1/users/{user_id}", json={"daily_tokens": None}, headers=ADMIN
        )
        spent_again = (await gw.send(token, "message 7")).json()["reply"]
        clock.advance(timedelta(hours=12))  # midnight has passed in the person's zone
        next_day = (await gw.send(token, "message 8")).json()["reply"]
        history = await gw.whole_history(token)
        refused = await gw.http.patch(
            f"/api/v1/users/{user_id}", json={"daily_tokens": -1}, headers=ADMIN
        )
        empty = await gw.http.patch(f"/api/v1/users/{user_id}", json={}, headers=ADMIN)
        missing = await gw.http.patch(
            f"/api/v1/users/{uuid.uuid4()}", json={"daily_tokens": 5}, headers=ADMIN
        )

    # 13, 26, 39 tokens: the third turn passes 30, the fourth message is told, the
    # fifth is stored and left unanswered, and the model is asked for neither.
    assert [r and r["text"] for r in replies] == [ANSWER, ANSWER, ANSWER, BUDGET_NOTICE, None]
    assert asked_while_spent == 3
    # Commands still answer, and /status says where the day stands.
    assert "Tokens today: 39 of 30 (the count starts again at midnight, your time)." in status
    assert lifted.status_code == 200
    assert lifted.json()["daily_tokens"] == 100
    assert after_lifting["text"] == ANSWER
    assert back.json()["daily_tokens"] is None
    assert spent_again is None  # the notice was given today already
    assert next_day["text"] == ANSWER
    assert len(llm.requests) == 5
    users = [m["text"] for m in history if m["role"] == "user" and m["text"] != "/status"]
    assert users == [f"message {n}" for n in range(1, 9)]
    assert [m["text"] for m in history].count(BUDGET_NOTICE) == 1
    assert [refused.status_code, empty.status_code, missing.status_code] == [422, 422, 404]


async def test_a_group_pays_apart_and_usage_follows_merges_and_erasure(world: World) -> None:
    ledger = world.repos.usage
    now = datetime(2026, 12, 5, 23, 30, tzinfo=UTC)
    call = [Usage(100, 40, 20, "m")]
    await ledger.charge_conversation(world.ana.conversation_id, UsageKind.TURN, call, now)
    await ledger.charge_conversation(world.group, UsageKind.TURN, call * 2, now)
    await ledger.charge_conversation(world.bo.conversation_id, UsageKind.BACKGROUND, call, now)

    ana = Payer(world.ana.user_id, False, world.ana.timezone)
    group = Payer(world.group, True, "UTC")
    day = now.date()
    assert await ledger.spent(ana, ana.day(now)) == 120
    assert await ledger.spent(group, day) == 240
    # Background work is counted, but not against the person's budget.
    assert await ledger.spent(Payer(world.bo.user_id, False, "UTC"), day) == 0
    rows = await ledger.rows(day - timedelta(days=1), day + timedelta(days=1))
    assert {(r.subject, r.group, r.kind, r.calls) for r in rows} == {
        (world.ana.user_id, False, UsageKind.TURN, 1),
        (world.group, True, UsageKind.TURN, 2),
        (world.bo.user_id, False, UsageKind.BACKGROUND, 1),
    }

    # Bo becomes part of Ana: his usage is hers now.
    assert await world.repos.links.merge_users(world.ana.user_id, world.bo.user_id, now=now)
    mine = await ledger.rows(day - timedelta(days=1), day + timedelta(days=1), world.ana.user_id)
    assert {(r.kind, r.calls) for r in mine} == {(UsageKind.TURN, 1), (UsageKind.BACKGROUND, 1)}
    assert not await ledger.rows(date.min, date.max, world.bo.user_id)

    await world.repos.erasure.erase_user(world.ana.user_id)
    assert not await ledger.rows(date.min, date.max, world.ana.user_id)
    assert await ledger.rows(date.min, date.max, world.group)  # the group's stays


async def test_a_group_has_its_own_budget_and_counts_against_no_members(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.responder = lambda body, number: Reply(ANSWER, pieces=3)  # 13 tokens a turn
    group = tg.group_chat()

    async def answered(chat: int, count: int) -> None:
        await p.tg.wait_until(lambda f: len(f.texts(chat)) == count)

    async with platform_gateway(
        database_url, tmp_path, llm, daily_tokens_per_person=60, daily_tokens_per_group=20
    ) as p:
        for n in range(1, 4):  # Ann's own: 39 tokens
            await p.telegram(tg.text_update(5555, f"private {n}", first_name="Ann"))
            await answered(5555, n)
        for n in range(1, 4):  # the group's: 13, 26, then spent
            await p.telegram(tg.mention_update(5555, f"@{tg.BOT_USERNAME} group {n}", group))
            await answered(group["id"], n)
        # Had the group's 26 been hers, 65 would be past her 60.
        await p.telegram(tg.text_update(5555, "private 4", first_name="Ann"))
        await answered(5555, 4)
        users = await p.gw.http.get("/api/v1/usage", params={"group_by": "user"}, headers=ADMIN)

    assert p.tg.texts(group["id"]) == [ANSWER, ANSWER, BUDGET_NOTICE]
    assert p.tg.texts(5555) == [ANSWER] * 4
    by_group = {row["group"]: row for row in users.json()["rows"]}
    assert by_group[True]["name"] == group["title"]
    assert by_group[True]["turns"]["calls"] == 2
    assert by_group[False]["turns"]["calls"] == 4
