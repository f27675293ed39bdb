"""The dashboard's Reminders tab of a person (DESIGN §9): each reminder with its next
local time, its repeat and its firings, and a cancel that the database shows, in
headless Chromium over the world's gateway (Ana talks on Telegram).

Needs Debian's Chromium at /usr/bin/chromium; skipped with a reason when it is missing,
except under CI=true, where it fails.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.async_api import Page, expect
from sqlalchemy import select, update

from gateway.reminders.times import format_local, wall_clock
from memory.storage.models import Schedule, ScheduleState, User
from tests.fakes.llm_server import FakeLLM
from tests.support.dashboard import Dialogs, dashboard, sign_in

pytest_plugins = ["tests.support.browser"]

pytestmark = pytest.mark.browser


async def test_a_persons_reminders_show_their_firings_and_are_cancelled_from_the_dashboard(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with dashboard(database_url, tmp_path, llm, page, reminder_sweep_seconds=3600) as d:
        ana = d.world.ana
        path = f"/users/{ana.user_id}/reminders"
        weekly = await d.api(
            "POST", path, json={"when": "P7D", "text": "weekly report", "repeat": "FREQ=WEEKLY"}
        )
        parcel = await d.api("POST", path, json={"when": "P1D", "text": "pick up the parcel"})
        # The parcel's time has come: moved into the past, and the sweep fires it.
        zone = await d.one(select(User.timezone).where(User.id == ana.user_id))
        assert zone is not None
        due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
        async with d.world.sessions() as session:
            await session.execute(
                update(Schedule)
                .where(Schedule.id == parcel.json()["id"])
                .values(next_due_at=due, next_local=format_local(wall_clock(due, ZoneInfo(zone))))
            )
            await session.commit()
        assert await d.p.gw.services.firings.sweep() == 1

        await sign_in(page, d.url)
        await page.goto(f"{d.url}/admin#/people/{ana.user_id}")
        # The firing's turn answers meanwhile, and its reply, rung in over the live
        # socket, scrolls the conversation: a click on a tab as it does can miss.
        await expect(page.get_by_role("list", name="Messages")).to_contain_text("reply 1")
        await expect(page.locator("#live")).to_have_text("live")
        await page.get_by_role("link", name="Reminders").click()
        listed = page.get_by_role("list", name="Reminders")
        fired = listed.locator(f"li[data-reminder='{parcel.json()['id']}']")
        await expect(fired).to_contain_text("pick up the parcel")
        await expect(fired.get_by_role("list", name="Firings")).to_contain_text("sent")
        await expect(fired.get_by_role("button", name="Cancel")).to_have_count(0)
        pending = listed.locator(f"li[data-reminder='{weekly.json()['id']}']")
        await expect(pending).to_contain_text("repeats FREQ=WEEKLY")
        await expect(pending).to_contain_text(f"({zone})")

        dialogs = Dialogs(page)
        dialogs.accept = True
        await pending.get_by_role("button", name="Cancel").click()
        await expect(page.locator("#toast")).to_have_text("Cancelled.")
        await expect(pending.get_by_role("button", name="Cancel")).to_have_count(0)
        state = await d.one(select(Schedule.state).where(Schedule.id == weekly.json()["id"]))

    assert state is ScheduleState.CANCELLED
