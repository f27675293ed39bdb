"""The dashboard's Operations and Health pages, deliveries shown live, and every page at
desktop width and on a 360 px phone (screenshots kept as test artifacts), over the
world's gateway in headless Chromium; each action checked in the database.

Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Page, Route, expect
from sqlalchemy import func, select, update

from memory.storage.models import (
    Chunk,
    ChunkStatus,
    Delivery,
    Identity,
    Message,
    PairingRequest,
)
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import Behaviour, FakeLLM, Reply
from tests.support import media
from tests.support.archive_checks import request_kind
from tests.support.dashboard import DESKTOP, PHONE, Dashboard, Dialogs, dashboard, sign_in
from tests.support.polling import eventually
from tests.support.webpage import csp_violations, screenshot

# The fixtures `chromium`, `browser` and `page`.
pytest_plugins = ["tests.support.browser"]

pytestmark = pytest.mark.browser

# What the platform says when it refuses a reply, and what a failing summary said.
REFUSAL = "Forbidden: bot was blocked by the user qxrefusal42"
JOB_ERROR = "qxjobfail: the model did not answer"


async def _ask_to_pair(d: Dashboard, external_id: str, name: str) -> str:
    pairing = await d.world.repos.pairings.request_pairing(
        "telegram", external_id, name, now=datetime.now(UTC), ttl=timedelta(hours=1), cap=10
    )
    assert pairing is not None
    return pairing.code


async def _failing_summary(d: Dashboard) -> int:
    """Ana's chunk still waiting for its summary, made one that keeps failing."""
    chunk_id = await d.one(
        select(Chunk.id).where(
            Chunk.conversation_id == d.world.ana.conversation_id,
            Chunk.status == ChunkStatus.PENDING,
        )
    )
    assert chunk_id is not None
    async with d.world.sessions() as session:
        await session.execute(
            update(Chunk)
            .where(Chunk.id == chunk_id)
            .values(status=ChunkStatus.FAILED, attempts=3, last_error=JOB_ERROR)
        )
        await session.commit()
    return chunk_id


async def test_pairing_requests_on_people_and_operations_approved_and_rejected_in_the_database(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with dashboard(database_url, tmp_path, llm, page) as d:
        stranger = await _ask_to_pair(d, "555", "Cy")  # nobody yet
        known = await _ask_to_pair(d, "300", "Bo")  # Bo's Telegram, asking again
        await sign_in(page, d.url)

        # People: who asks to be let in comes first; a known person says so too.
        asking = page.get_by_role("list", name="Pairing requests")
        await expect(asking.get_by_role("listitem")).to_have_count(2)
        people = page.get_by_role("list", name="People", exact=True)
        bo_row = people.get_by_role("listitem").filter(
            has=page.get_by_role("link", name="Bo", exact=True)
        )
        await expect(bo_row).to_contain_text("pairing pending")
        await page.get_by_label("with").select_option("a pairing request")
        with_request = people.get_by_role("link")
        await expect(with_request).to_have_text(["Bo"])
        owners = await d.rows(
            select(Identity.user_id)
            .join(
                PairingRequest,
                (PairingRequest.channel == Identity.channel)
                & (PairingRequest.external_id == Identity.external_id),
            )
            .where(
                PairingRequest.approved_at.is_(None),
                PairingRequest.expires_at > datetime.now(UTC),
            )
        )

        await (
            asking.locator(f"li[data-code='{stranger}']")
            .get_by_role("button", name="Approve")
            .click()
        )
        await expect(asking.locator(f"li[data-code='{stranger}']")).to_have_count(0)
        approved = await d.one(
            select(PairingRequest.approved_at).where(PairingRequest.code == stranger)
        )

        # Operations: the other is turned down, and forgotten.
        await page.get_by_role("link", name="Operations").click()
        waiting = page.locator(f"li[data-code='{known}']")
        await waiting.get_by_role("button", name="Reject").click()
        await expect(waiting).to_have_count(0)
        await expect(page.get_by_text("None waiting.")).to_be_visible()
        rejected = await d.one(select(PairingRequest.id).where(PairingRequest.code == known))
        listed = [p["code"] for p in (await d.api("GET", "/pairing")).json()["items"]]

    assert owners == [d.world.bo.user_id]
    assert approved is not None
    assert rejected is None
    assert listed == []


async def test_failed_work_on_operations_is_retried_and_the_database_shows_it_again(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    summarising = asyncio.Event()  # the retried summary's model call holds until set

    def summaries_wait(body: dict[str, Any], _: int) -> Behaviour | None:
        if request_kind(body) != "summary":
            return None
        return Reply("Ana counted zebrafish.", gate=summarising)

    llm.responder = summaries_wait
    async with dashboard(database_url, tmp_path, llm, page) as d:
        chunk_id = await _failing_summary(d)
        failed = (await d.api("GET", "/deliveries", params={"state": "failed"})).json()["items"]
        await sign_in(page, d.url)
        await page.get_by_label("with").select_option("a failed delivery")
        needing = page.get_by_role("list", name="People", exact=True).get_by_role("link")
        await expect(needing).to_have_text(["Ana"])
        await page.get_by_role("link", name="Operations").click()

        # A failed summary, with what went wrong, sent round again: pending in the
        # database (its attempts counted afresh, its error gone) until it is written.
        job = page.locator(f"li[data-job='summarize:{chunk_id}']")
        await expect(job).to_contain_text(JOB_ERROR)
        await job.get_by_role("button", name="Retry now").click()
        await expect(job).to_have_count(0)
        await llm.wait_until(lambda requests: any(request_kind(r) == "summary" for r in requests))
        requeued = await _chunk(d, chunk_id)
        summarising.set()
        done = await eventually(
            lambda: _chunk(d, chunk_id), until=lambda c: c[0] == ChunkStatus.READY
        )

        # A failed delivery, sent again: Telegram takes it this time.
        message = failed[0]["id"]
        await (
            page.locator(f"li[data-message='{message}']")
            .get_by_role("button", name="Retry")
            .click()
        )
        sent = await eventually(
            lambda: d.one(select(Message.delivery).where(Message.id == message)),
            until=lambda state: state == Delivery.SENT,
        )

    # Its attempts start again: the one under way is the first.
    assert requeued == (ChunkStatus.PENDING, 1, None, None)
    assert done[0] == ChunkStatus.READY
    assert done[3] == "Ana counted zebrafish."
    assert sent == Delivery.SENT
    assert any(t for t in d.p.tg.texts(100))  # the retried reply reached Ana on Telegram


async def _chunk(d: Dashboard, chunk_id: int) -> tuple[Any, ...]:
    async with d.world.sessions() as session:
        row = (
            await session.execute(
                select(Chunk.status, Chunk.attempts, Chunk.last_error, Chunk.summary).where(
                    Chunk.id == chunk_id
                )
            )
        ).one()
    return tuple(row)


async def test_a_reply_the_platform_refuses_turns_failed_live_with_its_reason_and_is_retried(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with dashboard(database_url, tmp_path, llm, page) as d:
        ana = d.world.ana
        pending = (
            await d.rows(
                select(Message).where(
                    Message.conversation_id == ana.conversation_id,
                    Message.delivery == Delivery.PENDING,
                )
            )
        )[0]
        await sign_in(page, d.url)
        await page.goto(f"{d.url}/admin#/people/{ana.user_id}")
        await expect(page.locator("#live")).to_have_text("live")
        shown = page.locator(f"li.message[data-seq='{pending.seq}']")
        await expect(shown).to_have_attribute("data-delivery", "pending")

        # Telegram refuses it (as the sweep would send it): the open page shows it
        # failed, with Telegram's words, without a reload.
        d.p.tg.fail("sendMessage", tg.TgFail(403, REFUSAL))
        await d.p.gw.services.outbox.resume(only=pending.id)
        await expect(shown).to_have_attribute("data-delivery", "failed")
        await expect(shown.locator(".reason")).to_contain_text("qxrefusal42")
        stored = await d.one(select(Message.delivery_error).where(Message.id == pending.id))

        await page.get_by_role("link", name="Operations").click()
        listed = page.locator(f"li[data-message='{pending.id}']")
        await expect(listed).to_contain_text("qxrefusal42")

        # Sent again from the conversation: pending, then sent, as it happens.
        await page.goto(f"{d.url}/admin#/people/{ana.user_id}")
        await shown.get_by_role("button", name="Retry delivery").click()
        await expect(shown).to_have_attribute("data-delivery", "sent")
        delivered = await d.one(select(Message.delivery).where(Message.id == pending.id))

    assert stored is not None
    assert "qxrefusal42" in stored
    assert delivered == Delivery.SENT


async def test_a_persons_files_are_shown_played_or_only_downloaded(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    page_file = tg.document_update(100, "BQAD-svg", "drawing.svg", "image/svg+xml", message_id=9003)
    async with dashboard(database_url, tmp_path, llm, page) as d:
        d.p.tg.files |= {"AgAD-large": media.photo(), "AwAD-voice": media.VOICE}
        d.p.tg.files["BQAD-svg"] = (
            b'<svg xmlns="http://www.w3.org/2000/svg"><script>1</script></svg>'
        )
        violations = csp_violations(page)
        for update in (
            tg.photo_update(100, caption="the sofa", message_id=9001),
            tg.voice_update(100, message_id=9002),
            page_file,
        ):
            await d.p.telegram(update)
            await d.p.gw.services.runner.idle()
        await sign_in(page, d.url)
        await page.goto(f"{d.url}/admin#/people/{d.world.ana.user_id}")
        files = page.locator("li.file")
        await expect(files).to_have_count(3)
        image, voice, drawing = files.nth(0), files.nth(1), files.nth(2)
        # The photo shown, loaded through the session; the voice note playable.
        await expect(image.locator("img")).to_have_attribute("src", re.compile("^blob:"))
        width = await image.locator("img").evaluate(
            "img => img.decode().then(() => img.naturalWidth)"
        )
        await expect(voice.locator("audio")).to_have_attribute("src", re.compile("^blob:"))
        # What is not an image Parley made is never rendered, only offered to download.
        await expect(drawing.locator("img, audio, iframe, object")).to_have_count(0)
        async with page.expect_download() as downloading:
            await drawing.get_by_role("button", name="Download").click()
        downloaded = await downloading.value
        saved = await downloaded.path()

    assert width == 120
    assert downloaded.suggested_filename == "drawing.svg"
    assert saved.read_bytes().startswith(b"<svg")
    assert violations == []


async def test_a_notice_goes_with_the_page_it_was_said_on(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with dashboard(database_url, tmp_path, llm, page) as d:
        bo = d.world.bo
        toast = page.locator("#toast")
        await sign_in(page, d.url)
        await page.goto(f"{d.url}/admin#/people/{bo.user_id}")
        await expect(page.locator("#live")).to_have_text("live")
        await page.get_by_label("Message from an operator").fill("An operator, briefly.")
        await page.get_by_role("button", name="Send").click()
        await expect(toast).to_have_text("Sent, labelled as from an operator.")
        source = await d.one(
            select(Message.source).where(
                Message.conversation_id == bo.conversation_id,
                Message.text == "An operator, briefly.",
            )
        )

        # Another page: the notice of the last one is not left over its charts.
        await page.get_by_role("link", name="Health").click()
        await expect(page.get_by_role("heading", name="Health", exact=True)).to_be_visible()
        over_health = await toast.text_content()

        # An action that moves to another page says its notice there.
        dialogs = Dialogs(page)
        dialogs.accept = True
        await page.goto(f"{d.url}/admin#/people/{bo.user_id}/memory")
        await page.get_by_role("button", name="Erase this person").click()
        await expect(page.get_by_role("heading", name="People", exact=True)).to_be_visible()
        await expect(toast).to_contain_text("Erased:")
        erased = await d.one(select(Identity.id).where(Identity.user_id == bo.user_id))

    assert source == "operator via REST"
    assert over_health == ""
    assert erased is None


async def test_a_page_that_fails_after_another_was_asked_for_does_not_cover_it(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    """Erase a person while their memory page is still loading: the page's last read
    fails (they are gone), after the dashboard moved to People; People stays."""
    async with dashboard(database_url, tmp_path, llm, page) as d:
        bo = d.world.bo
        asked, release = asyncio.Event(), asyncio.Event()

        async def hold_the_profile(route: Route) -> None:
            asked.set()
            await release.wait()
            await route.continue_()

        await page.route(f"**/api/v1/users/{bo.user_id}/profile", hold_the_profile)
        await sign_in(page, d.url)
        dialogs = Dialogs(page)
        dialogs.accept = True
        await page.goto(f"{d.url}/admin#/people/{bo.user_id}/memory")
        await asyncio.wait_for(asked.wait(), timeout=10)
        await page.get_by_role("button", name="Erase this person").click()
        await expect(page.locator("#toast")).to_contain_text("Erased:")
        await expect(page.get_by_role("heading", name="People", exact=True)).to_be_visible()
        async with page.expect_response(f"**/api/v1/users/{bo.user_id}/profile") as held:
            release.set()  # the held read now finds no such person
        assert (await held.value).status == 404
        # A few turns of the page's event loop: it has done what it does with the answer.
        for _ in range(3):
            await page.evaluate(
                "() => new Promise((r) => requestAnimationFrame(() => setTimeout(r)))"
            )
        problems = await page.get_by_role("heading", name="Something went wrong").count()
        people = await page.get_by_role("heading", name="People", exact=True).count()

    assert (problems, people) == (0, 1)


async def test_health_shows_the_waiting_work_and_the_charts_the_database_holds(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with dashboard(database_url, tmp_path, llm, page) as d:
        await d.p.telegram(tg.text_update(300, "a message today"))
        await d.p.tg.wait_until(lambda f: len(f.texts(300)) >= 1)
        await eventually(
            lambda: _count(d, Message.delivery == Delivery.PENDING, Message.text.like("reply%")),
            until=lambda n: n == 0,
        )  # the reply's delivery is on record
        queues = {
            "summaries": await _queue(
                d, Chunk, Chunk.status.in_([ChunkStatus.PENDING, ChunkStatus.FAILED])
            ),
            "extractions": await _queue(
                d,
                Chunk,
                Chunk.status == ChunkStatus.READY,
                Chunk.level == 0,
                Chunk.facts_extracted.is_(False),
            ),
            "deliveries": await _queue(d, Message, Message.delivery == Delivery.PENDING),
        }
        turns = await _count(d, Message.prompt_tokens.is_not(None))
        stats = (await d.api("GET", "/stats")).json()
        await sign_in(page, d.url)
        await page.get_by_role("link", name="Health").click()
        telegram = page.locator("tr[data-channel='telegram']")
        await expect(telegram).to_contain_text("yes")
        await expect(telegram).to_contain_text("it calls in")  # webhooks: no connection
        await expect(page.get_by_role("img")).to_have_count(3)
        waiting = {
            key: await page.locator(f"tr[data-queue='{key}'] td").first.text_content()
            for key in queues
        }
        dots = await page.locator("svg.chart circle").count()
        traffic = (
            await page.locator("figure")
            .first.locator("tbody tr")
            .evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent))")
        )

    today = datetime.now(UTC).date().isoformat()
    [prompt] = [day for day in stats["prompt_tokens_per_day"] if day["day"] == today]
    assert prompt["turns"] >= 1
    assert 0 < prompt["largest"] <= stats["prompt_limit"]
    by_channel = {
        d["channel"]: d["messages"] for d in stats["messages_per_day"] if d["day"] == today
    }
    assert by_channel["telegram"] >= 2  # the message and its reply
    assert [today, str(by_channel["telegram"])] in traffic
    # Every day of the window is charted, those without messages at 0.
    assert len(stats["days"]) == len(traffic) == 30
    assert stats["days"][-1] == today
    assert [day for day, *_ in traffic] == stats["days"]
    assert [n for n, _ in queues.values()] != [0, 0, 0]
    assert waiting == {key: str(n) for key, (n, _) in queues.items()}
    for key, (n, oldest) in queues.items():
        api = stats["queues"][key]
        assert api["waiting"] == n, key
        at = api["oldest_at"] and datetime.fromisoformat(api["oldest_at"])
        assert at == oldest, key
    assert dots == turns == len(stats["prompt_tokens_per_turn"]) >= 1


async def test_usage_charts_each_days_tokens_and_lists_each_persons_tokens_and_cost(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    # A dollar a token: what the page shows is checked to the cent.
    prices = {"fake-model": {"prompt": 1_000_000, "completion": 2_000_000}}
    async with dashboard(database_url, tmp_path, llm, page, llm_prices=prices) as d:
        for chat in (300, 301):
            await d.p.telegram(tg.text_update(chat, "a message today", update_id=chat + 600))
        await d.p.tg.wait_until(lambda f: bool(f.texts(300) and f.texts(301)))
        usage = (await d.api("GET", "/usage?group_by=user")).json()
        daily = (await d.api("GET", "/usage")).json()
        await sign_in(page, d.url)
        await page.get_by_role("link", name="Usage").click()
        await expect(page.locator("tr[data-subject]")).to_have_count(2)
        rows = await page.locator("tr[data-subject]").evaluate_all(
            "rows => rows.map(r => [r.dataset.subject, ...[...r.cells].map(c => c.textContent)])"
        )
        chart = (
            await page.locator("figure")
            .first.locator("tbody tr")
            .evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent))")
        )

    # Each reply: 10 prompt tokens and 3 completion tokens (a token a piece).
    expected = {row["key"]: [row["name"], "13", "0", "1", "$16.00"] for row in usage["rows"]}
    assert {subject: cells for subject, *cells in rows} == expected
    assert usage["total"]["cost_usd"] == "32.000000"
    today = datetime.now(UTC).date().isoformat()
    assert [today, "26", "0"] in chart
    assert len(chart) == 30 == len({day for day, *_ in chart})
    assert daily["total"]["calls"] == 2


async def _count(d: Dashboard, *where: Any) -> int:
    return int(await d.one(select(func.count()).select_from(Message).where(*where)) or 0)


async def _queue(d: Dashboard, table: Any, *where: Any) -> tuple[int, datetime | None]:
    async with d.world.sessions() as session:
        row = (
            await session.execute(select(func.count(), func.min(table.created_at)).where(*where))
        ).one()
    return int(row[0]), row[1]


async def test_every_page_at_desktop_width_and_on_a_360_px_phone(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    async with dashboard(database_url, tmp_path, llm, page) as d:
        ana = d.world.ana
        await _ask_to_pair(d, "555", "Cy")
        await _failing_summary(d)
        async with d.world.sessions() as session:  # a platform's reason, long and unbroken
            await session.execute(
                update(Message)
                .where(Message.delivery == Delivery.FAILED)
                .values(delivery_error=f"{REFUSAL} " + "x" * 120)
            )
            await session.commit()
        await d.p.telegram(tg.text_update(300, "a message today"))
        await d.p.tg.wait_until(lambda f: len(f.texts(300)) >= 1)
        widths: dict[str, int] = {}
        faults: dict[str, list[str]] = {}
        for size, suffix in ((DESKTOP, ""), (PHONE, "-360")):
            await page.set_viewport_size(size)
            await page.context.clear_cookies()
            await page.goto(d.url + "/admin/signin")
            await expect(page.get_by_label("Admin token")).to_be_visible()
            await _shot(page, artifacts, "admin-signin" + suffix, widths, faults)
            await sign_in(page, d.url)
            await expect(page.get_by_role("list", name="Pairing requests")).to_be_visible()
            await _shot(page, artifacts, "admin-people" + suffix, widths, faults)
            await page.goto(f"{d.url}/admin#/people/{ana.user_id}")
            await expect(page.locator("#live")).to_have_text("live")
            await _shot(page, artifacts, "admin-conversation" + suffix, widths, faults)
            await page.get_by_role("link", name="Memory").click()
            await _open_memory(page)
            await _shot(page, artifacts, "admin-memory" + suffix, widths, faults)
            await page.get_by_role("link", name="Reminders").click()
            await expect(page.locator("li[data-reminder]")).to_have_count(2)
            await _shot(page, artifacts, "admin-reminders" + suffix, widths, faults)
            await page.get_by_role("link", name="Operations").click()
            await expect(page.locator("li[data-job]")).to_have_count(1)
            await _shot(page, artifacts, "admin-operations" + suffix, widths, faults)
            await page.get_by_role("link", name="Health").click()
            await expect(page.get_by_role("img")).to_have_count(3)
            await _shot(page, artifacts, "admin-health" + suffix, widths, faults)
            await page.get_by_role("link", name="Usage").click()
            await expect(page.locator("tr[data-subject]")).to_have_count(1)
            await _shot(page, artifacts, "admin-usage" + suffix, widths, faults)

    too_wide = {name: w for name, w in widths.items() if name.endswith("-360") and w > 360}
    assert too_wide == {}  # nothing sticks out sideways on a phone
    assert len(widths) == 16
    assert {name: found for name, found in faults.items() if found} == {}  # contrast, ARIA


async def _open_memory(page: Page) -> None:
    """Everything the Memory tab folds away, unfolded: archive rows down to a
    transcript, what each lookup read."""
    top = page.locator("details[data-chunk]").first
    while True:
        await top.locator("summary").first.click()
        inside = top.locator("pre.transcript, details[data-chunk]").first
        await expect(inside).to_be_visible()
        if await inside.evaluate("e => e.tagName") == "PRE":
            break
        top = inside
    for folded in await page.get_by_role("list", name="Lookups").locator("details").all():
        await folded.locator("summary").click()


async def _shot(
    page: Page, artifacts: Path, name: str, widths: dict[str, int], faults: dict[str, list[str]]
) -> None:
    """A picture of the page, how wide it is, and what axe-core finds wrong in it."""
    await screenshot(page, artifacts / f"{name}.png", full_page=True)
    widths[name] = await page.evaluate("document.documentElement.scrollWidth")
    found = (await Axe().run(page)).response["violations"]
    faults[name] = [f"{v['id']}: {[n['target'] for n in v['nodes']][:3]}" for v in found]
