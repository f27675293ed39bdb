"""Reminders and follow-ups through a real gateway (DESIGN §9): set by the model's tool
in a web chat turn, fired by the sweep as a turn of the conversation, once; late ones
once and saying so; follow-ups inside quiet hours, past the cap and turned off; the
model bound to its own conversation; a moved person keeping wall-clock times.

The clock is a test clock, moved by the test; the sweep is called by the test (the
gateway's own runs only at start), so what fires when is the test's to say."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from gateway.reminders.planner import BY_OPERATOR, Ask, FollowUpsOff, Planner
from memory.storage.engine import session_factory
from memory.storage.models import (
    FireOutcome,
    Message,
    Schedule,
    ScheduleFire,
    ScheduleKind,
    ScheduleState,
)
from memory.storage.schedules import StoredSchedule
from tests.fakes.llm_server import CallTools, Fail, FakeLLM, Reply
from tests.support.clock import ManualClock
from tests.support.harness import ADMIN_TOKEN, Gateway, make_settings, running_gateway

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# Monday 1 March 2027, 10:00 in Berlin (CET).
START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


@asynccontextmanager
async def _gateway(
    database_url: str, tmp_path: Path, llm: FakeLLM | None, **extra: Any
) -> AsyncIterator[tuple[Gateway, ManualClock]]:
    clock = ManualClock(START)
    settings = make_settings(
        database_url,
        tmp_path,
        llm,
        default_timezone="Europe/Berlin",
        # The gateway sweeps once at start; after that, the test does.
        reminder_sweep_seconds=3600,
        **extra,
    )
    async with running_gateway(settings, clock=clock) as gw:
        yield gw, clock


def _planner(gw: Gateway, clock: ManualClock) -> Planner:
    return Planner(gw.services.repos.schedules, clock, follow_ups_per_day=2)


async def _remind(
    gw: Gateway, clock: ManualClock, conversation: uuid.UUID | str, ask: Ask
) -> StoredSchedule:
    """A reminder an operator set, in Berlin."""
    return await _planner(gw, clock).create(
        uuid.UUID(str(conversation)), ask, timezone="Europe/Berlin", by=BY_OPERATOR, user_id=None
    )


async def _visitor(gw: Gateway) -> tuple[str, uuid.UUID, uuid.UUID]:
    """A web chat visitor who has said hello: token, conversation, person."""
    token, conversation = await gw.visitor()
    assert (await gw.send(token, "hello")).status_code == 200
    owner = await gw.services.repos.conversations.personal_owner(uuid.UUID(conversation))
    assert owner is not None
    return token, uuid.UUID(conversation), owner


async def _fire(gw: Gateway) -> int:
    fired = await gw.services.firings.sweep()
    await gw.services.runner.idle()
    return fired


def _tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m.get("role") == "tool"]


async def _rows(gw: Gateway, model: Any, *where: Any) -> list[Any]:
    async with session_factory(gw.services.engine)() as session:
        return list((await session.scalars(select(model).where(*where))).all())


async def test_a_reminder_the_person_asks_for_fires_once_as_a_turn_with_the_conversation(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(
        CallTools([("reminder_create", {"when": "PT1M", "text": "call Ana"})]),
        Reply("I'll remind you at 10:01."),
        Reply("Time to call Ana! You said she expects you before noon."),
    )
    async with _gateway(database_url, tmp_path, llm) as (gw, clock):
        token, _ = await gw.visitor()
        asked = await gw.send(token, "remind me in a minute to call Ana")
        assert asked.json()["reply"]["text"] == "I'll remind you at 10:01."
        assert await _fire(gw) == 0  # not due yet
        clock.advance(timedelta(seconds=59))
        assert await _fire(gw) == 0
        clock.advance(timedelta(seconds=1))
        assert await _fire(gw) == 1
        assert await _fire(gw) == 0  # once
        clock.advance(timedelta(days=1))
        assert await _fire(gw) == 0
        history = await gw.history(token)
        fires = await _rows(gw, ScheduleFire)

    # The tool said the time back, local, with weekday and zone.
    said = _tool_results(llm.requests[1])
    [row] = fires
    made = row.schedule_id
    assert said == [
        f"Set #{made}: Mon 1 Mar 2027, 10:01 (Europe/Berlin) — reminder, once: call Ana"
    ]
    # The firing is a turn: the model wrote it with the whole conversation in view.
    assert len(llm.requests) == 3
    turn = llm.requests[2]["messages"]
    assert "remind me in a minute to call Ana" in str(turn)
    assert turn[-1]["content"].startswith(
        "[source: reminder set by the person on Mon 1 Mar 2027]\nReminder: call Ana"
    )
    fire, reply = history[-2:]
    assert (fire["role"], fire["text"]) == ("event", "Reminder: call Ana")
    assert (reply["role"], reply["text"]) == (
        "assistant",
        "Time to call Ana! You said she expects you before noon.",
    )
    assert (row.outcome, row.due_at, row.missed) == (
        FireOutcome.SENT,
        START + timedelta(minutes=1),
        0,
    )


async def test_concurrent_sweeps_fire_every_due_time_exactly_once(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        _, conversation, _ = await _visitor(gw)
        made = []
        for minute in range(1, 21):
            made.append(
                await _remind(gw, clock, conversation, Ask(f"PT{minute}M", f"thing {minute}"))
            )
        clock.advance(timedelta(minutes=30))
        fired = await asyncio.gather(*(gw.services.firings.sweep() for _ in range(3)))
        await gw.services.runner.idle()
        fires = await _rows(gw, ScheduleFire)
        firings = await _rows(gw, Message, Message.source.like("reminder set by%"))

    assert sum(fired) == 20
    assert sorted(f.schedule_id for f in fires) == [schedule.id for schedule in made]
    assert sorted(m.text for m in firings) == sorted(f"Reminder: thing {n}" for n in range(1, 21))


async def test_without_a_model_the_reminder_is_sent_in_its_own_words(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        token, conversation, _ = await _visitor(gw)
        await _remind(gw, clock, conversation, Ask("2027-03-01T10:05", "water the plants"))
        clock.advance(timedelta(minutes=5))
        assert await _fire(gw) == 1
        history = await gw.history(token)

    fire, reply = history[-2:]
    assert fire["role"] == "event"
    assert (reply["role"], reply["text"]) == ("assistant", "Reminder: water the plants")


async def test_with_the_model_down_the_reminder_is_sent_in_its_own_words(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with _gateway(database_url, tmp_path, llm) as (gw, clock):
        token, conversation, _ = await _visitor(gw)
        await _remind(gw, clock, conversation, Ask("PT2M", "take the pills"))
        llm.script(*[Fail(503)] * 5)
        clock.advance(timedelta(minutes=2))
        assert await _fire(gw) == 1
        history = await gw.history(token)

    assert (history[-1]["role"], history[-1]["text"]) == ("assistant", "Reminder: take the pills")


async def test_a_reminder_missed_while_down_fires_once_late_and_missed_repeats_collapse(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        token, conversation, _ = await _visitor(gw)
        daily = await _remind(
            gw, clock, conversation, Ask("2027-03-01T11:00", "stretch", repeat="FREQ=DAILY")
        )
        once = await _remind(gw, clock, conversation, Ask("2027-03-01T12:00", "pick up the parcel"))
        # Down from before 11:00 on the 1st until 15:00 on the 4th.
        clock.advance(timedelta(days=3, hours=5))
        assert await _fire(gw) == 2
        assert await _fire(gw) == 0
        history = await gw.history(token)
        fires = {f.schedule_id: f for f in await _rows(gw, ScheduleFire)}
        [stored] = await _rows(gw, Schedule, Schedule.id == daily.id)

    texts = [m["text"] for m in history if m["role"] == "event"]
    assert (
        "Reminder: stretch\n(This was due Mon 1 Mar 2027, 11:00 (Europe/Berlin), and 3 more "
        "times after that; it comes late because I was offline then.)"
    ) in texts
    assert (
        "Reminder: pick up the parcel\n(This was due Mon 1 Mar 2027, 12:00 (Europe/Berlin); "
        "it comes late because I was offline then.)"
    ) in texts
    assert (fires[daily.id].outcome, fires[daily.id].missed) == (FireOutcome.LATE, 3)
    assert fires[once.id].outcome is FireOutcome.LATE
    # The repeat goes on from the next due time after now: the 5th at 11:00.
    assert (stored.state, stored.next_local) == (ScheduleState.ACTIVE, "2027-03-05T11:00:00")


async def test_a_firing_within_the_grace_window_is_not_late(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        token, conversation, _ = await _visitor(gw)
        await _remind(gw, clock, conversation, Ask("PT1M", "stand up"))
        clock.advance(timedelta(minutes=59))
        assert await _fire(gw) == 1
        [fire] = await _rows(gw, ScheduleFire)
        history = await gw.history(token)
        metrics = (await gw.http.get("/metrics")).text

    assert fire.outcome is FireOutcome.SENT
    assert history[-1]["text"] == "Reminder: stand up"
    # Counted by outcome, with the lag from due to fired (58 minutes: within 1 hour).
    assert 'parley_reminder_fires_total{outcome="sent"} 1.0' in metrics
    assert 'parley_reminder_lag_seconds_bucket{le="300.0"} 0.0' in metrics
    assert 'parley_reminder_lag_seconds_bucket{le="3600.0"} 1.0' in metrics


async def test_follow_ups_wait_out_quiet_hours_keep_the_cap_and_stop_when_turned_off(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        token, conversation, owner = await _visitor(gw)
        planner = _planner(gw, clock)

        async def plan(when: str, text: str, kind: ScheduleKind) -> int:
            made = await planner.create(
                conversation,
                Ask(when, text, kind=kind),
                timezone="Europe/Berlin",
                by=BY_OPERATOR,
                user_id=owner,
            )
            return made.id

        # 23:00 in Berlin: inside the quiet hours (22:00-08:00).
        follow_up = await plan(
            "2027-03-01T23:00", "ask how the interview went", ScheduleKind.FOLLOW_UP
        )
        reminder = await plan("2027-03-01T23:00", "set the alarm", ScheduleKind.REMINDER)
        clock.advance(timedelta(hours=13))  # 23:00 Berlin
        assert await _fire(gw) == 1  # the reminder the person asked for
        [waiting] = await _rows(gw, Schedule, Schedule.id == follow_up)
        assert waiting.next_due_at == datetime(2027, 3, 2, 7, 0, tzinfo=UTC)  # 08:00 Berlin
        clock.advance(timedelta(hours=9))  # 07:00 UTC, 08:00 Berlin
        assert await _fire(gw) == 1

        # Two a day at most, the one at 08:00 counted: the third and fourth of the day
        # are skipped, and kept as skipped.
        await plan("2027-03-02T11:10", "follow-up 1", ScheduleKind.FOLLOW_UP)
        fourth = await plan("2027-03-02T11:20", "follow-up 2", ScheduleKind.FOLLOW_UP)
        third = await plan("2027-03-02T11:30", "follow-up 3", ScheduleKind.FOLLOW_UP)
        clock.advance(timedelta(hours=3, minutes=30))  # 11:30 Berlin
        assert await _fire(gw) == 3
        fires = {f.schedule_id: f for f in await _rows(gw, ScheduleFire)}

        # `/followups off` cancels what is planned, and no new one can be made.
        pending = await plan("2027-03-03T09:00", "follow-up 4", ScheduleKind.FOLLOW_UP)
        off = await gw.send(token, "/followups off")
        with pytest.raises(FollowUpsOff):
            await plan("2027-03-03T10:00", "follow-up 5", ScheduleKind.FOLLOW_UP)
        [cancelled] = await _rows(gw, Schedule, Schedule.id == pending)
        history = await gw.history(token)

    assert fires[reminder].outcome is FireOutcome.SENT
    assert fires[follow_up].outcome is FireOutcome.SENT
    assert fires[third].outcome is FireOutcome.SKIPPED
    assert fires[fourth].outcome is FireOutcome.SKIPPED
    assert fires[third].detail == "2 follow-ups were sent that day already"
    sent = [m["text"] for m in history if m["role"] == "assistant"]
    assert "Reminder: follow-up 1" in sent
    assert "Reminder: follow-up 2" not in sent
    assert "Reminder: follow-up 3" not in sent
    assert off.json()["reply"]["text"].startswith("Follow-ups are off")
    assert "(1 planned ones cancelled)" in off.json()["reply"]["text"]
    assert cancelled.state is ScheduleState.CANCELLED


async def test_the_model_never_sees_nor_cancels_another_conversations_reminders(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(CallTools([("reminder_create", {"when": "P1D", "text": "dentist"})]), Reply("Set."))
    async with _gateway(database_url, tmp_path, llm) as (gw, _):
        first, _ = await gw.visitor()
        await gw.send(first, "remind me tomorrow about the dentist")
        [made] = await _rows(gw, Schedule)
        llm.script(
            CallTools([("reminder_cancel", {"id": made.id}), ("reminders_list", {})]),
            Reply("Nothing to cancel."),
        )
        second, _ = await gw.visitor()
        await gw.send(second, "cancel that reminder and list mine")
        [theirs] = await _rows(gw, Schedule)

    assert _tool_results(llm.requests[3]) == [
        f"Error: there is no pending reminder #{made.id} in this conversation "
        "(reminders_list shows them).",
        "Nothing is pending.",
    ]
    assert theirs.state is ScheduleState.ACTIVE


async def test_a_wrong_call_is_answered_in_words_the_model_can_act_on(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(
        CallTools(
            [
                ("reminder_create", {"when": "2020-01-01T09:00", "text": "old"}),
                ("reminder_create", {"when": "PT1H", "text": "x", "repeat": "every day"}),
                ("reminder_create", {"when": "PT1H"}),
            ]
        ),
        Reply("Sorry."),
    )
    async with _gateway(database_url, tmp_path, llm) as (gw, _):
        token, _ = await gw.visitor()
        await gw.send(token, "remind me")
        stored = await _rows(gw, Schedule)

    past, repeat, missing = _tool_results(llm.requests[1])
    assert past.startswith("Error: Wed 1 Jan 2020, 09:00 (Europe/Berlin) is in the past")
    assert repeat.startswith("Error: a repeat is an RRULE with FREQ one of")
    assert missing.startswith("Error: the arguments of reminder_create are not valid: text:")
    assert stored == []


async def test_chat_commands_list_and_cancel_reminders(database_url: str, tmp_path: Path) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        token, conversation, _ = await _visitor(gw)
        for when, text, repeat in (
            ("2027-03-02T09:00", "call Ana", None),
            ("2027-03-08T08:00", "weekly report", "FREQ=WEEKLY;BYDAY=MO"),
        ):
            await _remind(gw, clock, conversation, Ask(when, text, repeat))
        listed = (await gw.send(token, "/reminders")).json()["reply"]["text"]
        cancelled = (await gw.send(token, "/reminders cancel 1")).json()["reply"]["text"]
        wrong = (await gw.send(token, "/reminders cancel 5")).json()["reply"]["text"]
        after = (await gw.send(token, "/reminders")).json()["reply"]["text"]

    assert listed == (
        "Pending:\n"
        "1. Tue 2 Mar 2027, 09:00 (Europe/Berlin) — reminder, once: call Ana\n"
        "2. Mon 8 Mar 2027, 08:00 (Europe/Berlin) — reminder, repeats FREQ=WEEKLY;BYDAY=MO: "
        "weekly report\n\n(`/reminders cancel N` cancels one.)"
    )
    assert cancelled == "Cancelled: call Ana"
    assert wrong == "There is no reminder 5: `/reminders` lists 1."
    assert after.startswith("Pending:\n1. Mon 8 Mar 2027, 08:00")


async def test_a_person_who_moves_keeps_wall_clock_times(database_url: str, tmp_path: Path) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        _, conversation, _ = await _visitor(gw)
        made = await _remind(gw, clock, conversation, Ask("2027-03-02T09:00", "call Ana"))
        moved = await gw.http.patch(
            f"/api/v1/sessions/{conversation}", json={"timezone": "America/New_York"}, headers=ADMIN
        )
        [stored] = await _rows(gw, Schedule, Schedule.id == made.id)

    assert moved.status_code == 200, moved.text
    assert made.next_due_at == datetime(2027, 3, 2, 8, 0, tzinfo=UTC)  # 09:00 CET
    assert stored.next_due_at == datetime(2027, 3, 2, 14, 0, tzinfo=UTC)  # 09:00 EST


async def test_deleting_the_conversation_deletes_its_reminders(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        _, conversation, _ = await _visitor(gw)
        await _remind(gw, clock, conversation, Ask("PT1M", "x"))
        clock.advance(timedelta(minutes=1))
        assert await _fire(gw) == 1
        deleted = await gw.http.delete(f"/api/v1/sessions/{conversation}", headers=ADMIN)
        async with session_factory(gw.services.engine)() as session:
            left = await session.scalar(select(func.count()).select_from(Schedule))
            fires = await session.scalar(select(func.count()).select_from(ScheduleFire))

    assert deleted.status_code in (200, 204), deleted.text
    assert (left, fires) == (0, 0)


async def test_a_reminder_nobody_can_be_sent_is_kept_as_failed(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        # A conversation nobody has typed into yet (a visitor who only opened it).
        _, conversation = await gw.visitor()
        await _remind(gw, clock, uuid.UUID(conversation), Ask("PT1M", "x"))
        clock.advance(timedelta(minutes=1))
        assert await _fire(gw) == 1
        [fire] = await _rows(gw, ScheduleFire)

    assert (fire.outcome, fire.detail) == (
        FireOutcome.FAILED,
        "nobody has written into this conversation yet",
    )


async def test_operators_list_set_and_cancel_a_persons_reminders_over_rest(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path, None) as (gw, clock):
        token, _, owner = await _visitor(gw)
        path = f"/api/v1/users/{owner}/reminders"
        body = {"when": "2027-03-02T09:00", "text": "call Ana", "repeat": "FREQ=DAILY;COUNT=2"}
        keyed = {**ADMIN, "Idempotency-Key": "reminder-1"}
        made = await gw.http.post(path, json=body, headers=keyed)
        again = await gw.http.post(path, json=body, headers=keyed)
        once = await gw.http.post(path, json={"when": "PT1M", "text": "stand up"}, headers=ADMIN)
        refused = {
            name: await gw.http.post(path, json=bad, headers=ADMIN)
            for name, bad in {
                "past": {"when": "2027-03-01T09:00", "text": "x"},
                "repeat": {"when": "P1D", "text": "x", "repeat": "FREQ=SECONDLY"},
                "unknown field": {"when": "P1D", "text": "x", "due_at": "2027-01-01"},
                "empty text": {"when": "P1D", "text": ""},
                "huge duration": {"when": "P99999999999D", "text": "x"},
                "kind": {"when": "P1D", "text": "x", "kind": "nag"},
            }.items()
        }
        nobody = await gw.http.post(
            f"/api/v1/users/{uuid.uuid4()}/reminders", json=body, headers=ADMIN
        )
        clock.advance(timedelta(minutes=1))
        assert await _fire(gw) == 1
        listed = await gw.http.get(path, headers=ADMIN)
        reminder, stood_up = made.json()["id"], once.json()["id"]
        cancelled = await gw.http.delete(f"/api/v1/reminders/{reminder}", headers=ADMIN)
        twice = await gw.http.delete(f"/api/v1/reminders/{reminder}", headers=ADMIN)
        over = await gw.http.delete(f"/api/v1/reminders/{stood_up}", headers=ADMIN)
        unknown = await gw.http.delete("/api/v1/reminders/999999", headers=ADMIN)
        history = await gw.history(token)

    assert made.status_code == 201, made.text
    assert made.json() | {"created_at": None} == {
        "id": reminder,
        "kind": "reminder",
        "text": "call Ana",
        "when": "2027-03-02T09:00:00+01:00[Europe/Berlin]",
        "due_at": "2027-03-02T08:00:00Z",
        "repeat": "FREQ=DAILY;COUNT=2",
        "state": "active",
        "channel": None,
        "created_by": "an operator",
        "created_at": None,
        "fired": 0,
        "firings": [],
    }
    assert (again.status_code, again.json()["id"]) == (201, reminder)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert {name: r.status_code for name, r in refused.items()} == dict.fromkeys(refused, 422)
    assert "is in the past" in refused["past"].json()["error"]["message"]
    assert "FREQ one of" in refused["repeat"].json()["error"]["message"]
    assert nobody.status_code == 404
    items = {item["id"]: item for item in listed.json()["items"]}
    assert listed.json()["next_cursor"] is None
    assert items[stood_up]["state"] == "done"
    assert items[stood_up]["when"] is None
    assert [f["outcome"] for f in items[stood_up]["firings"]] == ["sent"]
    assert items[stood_up]["fired"] == 1
    assert (cancelled.status_code, twice.status_code) == (204, 204)
    assert over.status_code == 409
    assert unknown.status_code == 404
    assert "[source: reminder set by an operator" not in str(history)  # never shown to people
    assert history[-1]["text"] == "Reminder: stand up"
