"""Reminders and WhatsApp's 24-hour window (DESIGN §9), against the fake Graph API: past
the window a reminder goes out as the configured template, else on another channel of
the person, else it is held, and sent once the person writes again.

The clock is a test clock; the person's last WhatsApp message carries a timestamp 25
hours before it, as WhatsApp would send an old message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from memory.storage.engine import session_factory
from memory.storage.models import FireOutcome, Message, ScheduleFire
from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.clock import ManualClock
from tests.support.harness import ADMIN_TOKEN
from tests.support.platforms import Platforms, platform_gateway
from tests.support.polling import eventually

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PERSON = "16505551234"
WINDOW_CLOSED = wa.GraphFail(
    400,
    131047,
    "Message failed to send because more than 24 hours have passed since the customer "
    "last replied to this number.",
)


@asynccontextmanager
async def _gateway(
    database_url: str, tmp_path: Path, llm: FakeLLM, **extra: Any
) -> AsyncIterator[tuple[Platforms, ManualClock]]:
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    async with platform_gateway(
        database_url, tmp_path, llm, clock=clock, reminder_sweep_seconds=3600, **extra
    ) as p:
        yield p, clock


async def _wrote_on_whatsapp(p: Platforms, clock: ManualClock, text: str, age: timedelta) -> str:
    """The person writes on WhatsApp (`age` ago, by the message's timestamp); their id."""
    at = int((clock.now() - age).timestamp())
    said = await p.whatsapp(wa.message_notification(PERSON, text=text, timestamp=at))
    assert said.status_code == 200, said.text
    await p.gw.services.runner.idle()
    people = (await p.gw.http.get("/api/v1/users", headers=ADMIN)).json()["items"]
    [person] = [u for u in people if any(i["external_id"] == PERSON for i in u["identities"])]
    return str(person["id"])


async def _remind(p: Platforms, user_id: str, **body: Any) -> int:
    made = await p.gw.http.post(
        f"/api/v1/users/{user_id}/reminders",
        json={"when": "PT1M", "text": "renew the passport"} | body,
        headers=ADMIN,
    )
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


async def _fire(p: Platforms) -> int:
    fired = await p.gw.services.firings.sweep()
    await p.gw.services.runner.idle()
    return fired


async def _fires(p: Platforms, schedule_id: int) -> list[ScheduleFire]:
    async with session_factory(p.gw.services.engine)() as session:
        query = select(ScheduleFire).where(ScheduleFire.schedule_id == schedule_id)
        return list((await session.scalars(query)).all())


async def _firing_texts(p: Platforms) -> list[str]:
    async with session_factory(p.gw.services.engine)() as session:
        query = select(Message.text).where(Message.source.like("reminder set by%"))
        return list((await session.scalars(query)).all())


async def test_past_the_window_with_nowhere_else_a_reminder_waits_for_the_persons_next_message(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with _gateway(database_url, tmp_path, llm) as (p, clock):
        person = await _wrote_on_whatsapp(p, clock, "see you", timedelta(hours=25))
        schedule = await _remind(p, person)
        clock.advance(timedelta(minutes=1))
        assert await _fire(p) == 1
        [held] = await _fires(p, schedule)
        sent_while_held = len(p.wa.texts(PERSON))
        assert await _fire(p) == 0  # nothing is sent while they are silent
        assert await _firing_texts(p) == []

        llm.script(Reply("hello again!"), Reply("And your reminder: renew the passport."))
        clock.advance(timedelta(hours=2))
        await _wrote_on_whatsapp(p, clock, "I'm back", timedelta(0))
        await _fire(p)  # the next sweep sends what was held
        await p.wa.wait_until(lambda f: "And your reminder: renew the passport." in f.texts(PERSON))
        [released] = await _fires(p, schedule)
        [firing] = await _firing_texts(p)

    assert held.outcome is FireOutcome.HELD
    assert held.detail is not None
    assert held.detail.endswith("held until the person writes again")
    assert sent_while_held == 0  # the reply to the day-old message could not go either
    assert released.outcome is FireOutcome.SENT
    assert released.detail is not None
    assert released.detail.endswith("; sent once they wrote again")
    assert firing.startswith("Reminder: renew the passport\n(This was due ")
    assert firing.endswith("I could only send it once you wrote again.)")


async def test_past_the_window_a_reminder_goes_out_as_the_configured_template(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with _gateway(
        database_url, tmp_path, llm, whatsapp_reminder_template="reminder_v2:pt_BR"
    ) as (p, clock):
        person = await _wrote_on_whatsapp(p, clock, "see you", timedelta(hours=25))
        await _remind(p, person)
        clock.advance(timedelta(minutes=1))
        # The platform has the last word on its window: it refuses free text.
        p.wa.fail(WINDOW_CLOSED)
        llm.script(Reply("Hi Kerry!\nTime to renew the passport."))
        assert await _fire(p) == 1
        await p.wa.wait_until(lambda f: len(f.templates_sent) == 1)

    [sent] = p.wa.templates_sent
    assert sent["to"] == PERSON
    assert sent["template"]["name"] == "reminder_v2"
    assert sent["template"]["language"] == {"code": "pt_BR"}
    [body] = sent["template"]["components"]
    assert body["parameters"] == [{"type": "text", "text": "Hi Kerry! Time to renew the passport."}]
    assert p.wa.texts(PERSON) == []


async def test_past_the_window_a_reminder_goes_to_another_channel_of_the_person(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with _gateway(database_url, tmp_path, llm) as (p, clock):
        on_whatsapp = await _wrote_on_whatsapp(p, clock, "see you", timedelta(hours=25))
        said = await p.telegram(
            tg.text_update(700, "hi on telegram", date=int(clock.now().timestamp()))
        )
        assert said.status_code == 200
        await p.gw.services.runner.idle()
        people = (await p.gw.http.get("/api/v1/users", headers=ADMIN)).json()["items"]
        [on_telegram] = [u["id"] for u in people if u["id"] != on_whatsapp]
        merged = await p.gw.http.post(
            f"/api/v1/users/{on_whatsapp}/merge",
            json={"other_user_id": on_telegram},
            headers=ADMIN,
        )
        assert merged.status_code == 200, merged.text
        schedule = await _remind(p, on_whatsapp, channel="whatsapp")
        clock.advance(timedelta(minutes=1))
        llm.script(Reply("Time to renew the passport (sent here: WhatsApp is closed)."))
        assert await _fire(p) == 1
        await eventually(
            lambda: _sent_to_telegram(p),
            until=lambda texts: any("renew the passport" in t for t in texts),
        )
        [fire] = await _fires(p, schedule)

    assert fire.outcome is FireOutcome.SENT
    assert p.wa.texts(PERSON) == []


async def _sent_to_telegram(p: Platforms) -> list[str]:
    return p.tg.texts(700)
