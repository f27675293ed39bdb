"""The operator dashboard (`/admin`) in headless Chromium, over a gateway that holds two
people, a group, an archive, profiles, a failed delivery and pairing requests: every
action an operator takes there is checked against what the API (the database) holds.

Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Dialog, Page, expect
from sqlalchemy import select

from memory.storage.engine import create_engine
from memory.storage.models import PairingRequest
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import ADMIN_TOKEN
from tests.support.platforms import ADMIN, Platforms, platform_gateway
from tests.support.polling import eventually
from tests.support.webpage import TIMEOUT_MS, Line, screenshot
from tests.support.world import MARKER, World, build_world

# The fixtures `chromium`, `browser` and `page`.
pytest_plugins = ["tests.support.browser"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


@contextlib.asynccontextmanager
async def dashboard(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> AsyncIterator[tuple[Platforms, World]]:
    """A gateway with Telegram (Ana and Bo talk there) and the world in its database."""
    async with platform_gateway(database_url, tmp_path, llm) as p:
        engine = create_engine(database_url)
        try:
            world = await build_world(engine, tmp_path / "world")
            yield p, world
        finally:
            await engine.dispose()


async def sign_in(page: Page, url: str) -> None:
    await page.goto(url + "/admin")
    await expect(page).to_have_url(url + "/admin/signin")
    await page.get_by_label("Admin token").fill(ADMIN_TOKEN)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="People")).to_be_visible(timeout=TIMEOUT_MS)


async def _api(p: Platforms, method: str, path: str, **kwargs: Any) -> Any:
    return await p.gw.http.request(method, "/api/v1" + path, **({"headers": ADMIN} | kwargs))


async def test_find_a_person_read_their_memory_and_act_on_it(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    async with dashboard(database_url, tmp_path, llm) as (p, world):
        url = p.gw.url
        await sign_in(page, url)
        await screenshot(page, artifacts / "admin-people.png")

        # A word only Ana's archived messages hold finds her, and only her.
        await page.get_by_label("Find a person").fill(MARKER)
        await page.get_by_label("Find a person").press("Enter")
        people = page.get_by_role("list", name="People").get_by_role("link")
        await expect(people).to_have_text(["Ana"])
        await people.first.click()
        await expect(page.get_by_role("heading", name="Ana")).to_be_visible()
        await expect(page.locator("#live")).to_have_text("live")
        await screenshot(page, artifacts / "admin-conversation.png")

        # Memory: an archive row down to its verbatim transcript.
        await page.get_by_role("link", name="Memory").click()
        rows = page.locator("details[data-chunk]")
        await expect(rows.first).to_be_visible()
        top = rows.first
        while True:  # down the levels, to a level-0 row's transcript
            await top.locator("summary").first.click()
            inside = top.locator("pre.transcript, details[data-chunk]").first
            await expect(inside).to_be_visible()
            if await inside.evaluate("e => e.tagName") == "PRE":
                break
            top = inside
        transcript = top.locator("pre.transcript")
        await expect(transcript).to_contain_text(f"{MARKER} number")
        await screenshot(page, artifacts / "admin-memory.png")

        # A profile line's evidence opens the message it came from.
        line = page.locator("li[data-line='1']")
        await expect(line).to_contain_text(f"likes {MARKER} soup")
        await line.get_by_role("link", name="from message #1").click()
        focused = page.locator("li.message.focus")
        await expect(focused).to_have_attribute("data-seq", "1")
        await expect(focused).to_contain_text(f"{MARKER} number 0")

        # An edit goes in; an edit made against an older revision is refused.
        await page.get_by_role("link", name="Memory").click()
        await page.locator("li[data-line='2']").get_by_role("button", name="Edit").click()
        await page.get_by_label("Line 2").fill("lives by a lake")
        await page.get_by_role("button", name="Save").click()
        await expect(page.locator("#toast")).to_have_text("Profile saved.")
        await expect(page.locator("li[data-line='2']")).to_contain_text("lives by a lake")
        # The change is on record as an operator's, newest first.
        newest = page.get_by_role("list", name="Profile changes").get_by_role("listitem").first
        await expect(newest).to_contain_text("operator")
        await expect(newest).to_contain_text("+ lives by a lake")
        await page.locator("li[data-line='2']").get_by_role("button", name="Edit").click()
        profile = (await _api(p, "GET", f"/users/{world.ana.user_id}/profile")).json()
        meanwhile = await _api(
            p,
            "PATCH",
            f"/users/{world.ana.user_id}/profile",
            json={"edits": [{"replace": [1], "with": "likes soup"}]},
            headers=ADMIN | {"If-Match": f'"profile-{profile["revision"]}"'},
        )
        assert meanwhile.status_code == 200, meanwhile.text
        await page.get_by_label("Line 2").fill("by a lake")
        await page.get_by_role("button", name="Save").click()
        await expect(page.locator("#toast")).to_contain_text("changed meanwhile")
        after = (await _api(p, "GET", f"/users/{world.ana.user_id}/profile")).json()

        # Erase Ana, confirming.
        page.once("dialog", lambda dialog: _accept(dialog))
        await page.get_by_role("button", name="Erase this person").click()
        await expect(page.get_by_role("heading", name="People")).to_be_visible()
        gone = await _api(p, "GET", f"/users/{world.ana.user_id}")

        await page.set_viewport_size({"width": 360, "height": 740})
        await screenshot(page, artifacts / "admin-people-360.png", full_page=True)
        wide = await page.evaluate("document.documentElement.scrollWidth")

    assert [line["text"] for line in after["lines"]] == ["likes soup", "lives by a lake"]
    assert wide <= 360  # nothing sticks out sideways on a phone
    assert gone.status_code == 404


def _accept(dialog: Dialog) -> Any:
    return dialog.accept()


async def test_operations_approve_pairing_and_retry_a_failed_delivery(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    async with dashboard(database_url, tmp_path, llm) as (p, world):
        url = p.gw.url
        await world.repos.pairings.request_pairing(
            "telegram", "555", "Cy", now=datetime.now(UTC), ttl=timedelta(hours=1), cap=10
        )
        failed = (await _api(p, "GET", "/deliveries", params={"state": "failed"})).json()["items"]
        pending = (await _api(p, "GET", "/pairing")).json()["items"]
        await sign_in(page, url)
        await page.get_by_label("with").select_option("a failed delivery")
        needing = page.get_by_role("list", name="People").get_by_role("link")
        await expect(needing).to_have_text(["Ana"])
        await page.get_by_role("link", name="Operations").click()
        await expect(page.locator(f"li[data-message='{failed[0]['id']}']")).to_be_visible()
        await screenshot(page, artifacts / "admin-operations.png")

        code = pending[0]["code"]
        await page.locator(f"li[data-code='{code}']").get_by_role("button", name="Approve").click()
        await expect(page.locator(f"li[data-code='{code}']")).to_have_count(0)
        message = failed[0]["id"]
        await (
            page.locator(f"li[data-message='{message}']")
            .get_by_role("button", name="Retry")
            .click()
        )

        async def delivery() -> str | None:
            items = (
                await _api(
                    p,
                    "GET",
                    f"/sessions/{failed[0]['conversation_id']}/messages",
                    params={"after_seq": failed[0]["seq"] - 1, "limit": 1},
                )
            ).json()["items"]
            return str(items[0]["delivery"])

        sent = await eventually(delivery, until=lambda state: state == "sent")
        waiting = [i["code"] for i in (await _api(p, "GET", "/pairing")).json()["items"]]
        async with world.sessions() as session:
            approved = await session.scalar(
                select(PairingRequest.approved_at).where(PairingRequest.code == code)
            )
    # With the gateway gone, the page says so (and throws nothing uncaught).
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.locator("#toast")).to_have_text("The gateway did not answer. Is it running?")

    assert code not in waiting
    assert approved is not None
    assert sent == "sent"
    assert any(t for t in p.tg.texts(100))  # the retried reply reached Ana on Telegram


async def test_a_new_message_appears_live_also_after_the_socket_came_back(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    line = Line(r"/admin/live\b")
    await line.install(page)
    async with dashboard(database_url, tmp_path, llm) as (p, world):
        await sign_in(page, p.gw.url)
        await page.goto(f"{p.gw.url}/admin#/people/{world.bo.user_id}")
        await expect(page.locator("#live")).to_have_text("live")
        await p.telegram(tg.text_update(300, "Bo says hello live"))
        messages = page.locator("li.message")
        await expect(messages.filter(has_text="Bo says hello live")).to_have_count(1)

        await line.cut(stay_down=True)
        await expect(page.locator("#live")).to_have_text("reconnecting…")
        await p.telegram(tg.text_update(300, "said while the socket was down"))
        await p.tg.wait_until(lambda f: len(f.texts(300)) >= 2)
        line.up = True
        await expect(page.locator("#live")).to_have_text("live")
        await expect(messages.filter(has_text="said while the socket was down")).to_have_count(1)

        # An operator writes in: labelled as such, stored, delivered on Telegram.
        await page.get_by_label("Message from an operator").fill("An operator here: all fine?")
        await page.get_by_role("button", name="Send").click()
        sent = messages.filter(has_text="An operator here: all fine?")
        await expect(sent).to_contain_text("[source: operator via REST]")
        await p.tg.wait_until(lambda f: "An operator here: all fine?" in f.texts(300))
        seqs = await messages.evaluate_all("els => els.map(e => Number(e.dataset.seq))")

    assert seqs == sorted(set(seqs))  # in order, none twice
    assert seqs == list(range(seqs[0], seqs[-1] + 1))  # and none missing


async def test_nothing_without_a_session_and_no_change_without_the_csrf_token(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, browser: Browser
) -> None:
    async with dashboard(database_url, tmp_path, llm) as (p, world):
        url = p.gw.url
        stranger = await browser.new_context()
        try:
            anonymous = await stranger.new_page()
            await anonymous.goto(url + "/admin")
            landed = anonymous.url
            api = await stranger.request.get(url + "/api/v1/users")
            socket_refused = await anonymous.evaluate(
                """url => new Promise(done => {
                    const ws = new WebSocket(url);
                    ws.onclose = e => done(e.code);
                })""",
                url.replace("http", "ws") + f"/admin/live?session={world.bo.conversation_id}",
            )
        finally:
            await stranger.close()

        await sign_in(page, url)
        request = page.context.request
        forged = await request.delete(url + f"/api/v1/users/{world.bo.user_id}")
        forged_signout = await request.delete(url + "/admin/session")
        still = await _api(p, "GET", f"/users/{world.bo.user_id}")
        cookies = await page.context.cookies()

    assert landed == url + "/admin/signin"
    assert api.status == 401
    assert socket_refused == 4401
    assert forged.status == 403
    assert forged_signout.status == 403
    assert still.status_code == 200
    [cookie] = [c for c in cookies if c["name"] == "parley_operator"]
    assert cookie["httpOnly"] is True
    assert cookie["secure"] is True
    assert cookie["sameSite"] == "Strict"


async def test_health_shows_channels_and_charts_what_the_database_holds(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    async with dashboard(database_url, tmp_path, llm) as (p, _):
        await p.telegram(tg.text_update(300, "a message today"))
        await p.tg.wait_until(lambda f: len(f.texts(300)) >= 1)
        stats = (await _api(p, "GET", "/stats")).json()
        await sign_in(page, p.gw.url)
        await page.get_by_role("link", name="Health").click()
        telegram = page.locator("tr[data-channel='telegram']")
        await expect(telegram).to_contain_text("yes")
        await expect(telegram).to_contain_text("it calls in")  # webhooks: no connection
        charts = page.get_by_role("img")
        await expect(charts).to_have_count(3)
        await screenshot(page, artifacts / "admin-health.png", full_page=True)
        shown = (
            await page.locator("figure")
            .first.locator("tbody tr")
            .evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent))")
        )

    today = datetime.now(UTC).date().isoformat()
    [prompt] = [d for d in stats["prompt_tokens_per_day"] if d["day"] == today]
    assert prompt["turns"] >= 1
    assert 0 < prompt["largest"] <= stats["prompt_limit"]
    by_channel = {
        d["channel"]: d["messages"] for d in stats["messages_per_day"] if d["day"] == today
    }
    assert by_channel["telegram"] >= 2  # the message and its reply
    assert [today, str(by_channel["telegram"])] in shown


async def test_unlink_an_identity_and_merge_another_person_in(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    page.on("dialog", _accept)
    async with dashboard(database_url, tmp_path, llm) as (p, world):
        await sign_in(page, p.gw.url)
        await page.goto(f"{p.gw.url}/admin#/people/{world.ana.user_id}/memory")
        discord = page.locator(f"li[data-identity='{world.ana_discord}']")
        await discord.get_by_role("button", name="Unlink").click()
        await expect(page.locator(f"li[data-identity='{world.ana_discord}']")).to_have_count(0)
        await page.get_by_label("Merge another person into this one").fill("Bo")
        await page.get_by_role("button", name="Find").click()
        await page.get_by_role("button", name="Merge Bo into Ana").click()
        await expect(page.locator("li[data-identity]")).to_have_count(2)
        ana = (await _api(p, "GET", f"/users/{world.ana.user_id}")).json()
        bo = await _api(p, "GET", f"/users/{world.bo.user_id}")

    assert sorted((i["channel"], i["external_id"]) for i in ana["identities"]) == [
        ("telegram", "100"),
        ("telegram", "300"),
    ]
    assert bo.status_code == 404  # all of Bo is Ana's now: no empty person is left
