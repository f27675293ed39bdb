"""The operator dashboard (`/admin`) in headless Chromium, over a gateway that holds two
people, a group, an archive, profiles, deliveries and pairing requests: what the page
shows is what the database holds, and every action an operator takes there is checked
in the database (and the data dir) afterwards. No page reaches any host but the gateway.

Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, Request, Route, expect
from sqlalchemy import func, select

from memory.profile.profiles import Profiles
from memory.storage.models import (
    Chunk,
    Conversation,
    Identity,
    Lookup,
    Message,
    Profile,
    RetiredFact,
    User,
)
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.dashboard import Dashboard, Dialogs, OwnOrigin, dashboard, sign_in
from tests.support.webpage import Line, WatchedLine
from tests.support.world import FILLER, MARKER, files_with

# The fixtures `chromium`, `browser` and `page`.
pytest_plugins = ["tests.support.browser"]

pytestmark = pytest.mark.browser


def _changes(page: Page) -> list[str]:
    """A list that fills with every change (not a GET) the page asks of the API."""
    seen: list[str] = []

    def record(request: Request) -> None:
        if request.method != "GET" and "/api/v1/" in request.url:
            seen.append(f"{request.method} {request.url}")

    page.on("request", record)
    return seen


async def test_a_person_found_by_an_archived_word_and_their_memory_match_the_database(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with dashboard(database_url, tmp_path, llm, page) as d:
        ana = d.world.ana
        await sign_in(page, d.url)

        # A word of archived messages finds whoever wrote them in their own conversation.
        owners = await d.rows(
            select(Conversation.user_id)
            .join(Message, Message.conversation_id == Conversation.id)
            .where(
                Message.chunk_id.is_not(None),
                Message.text.contains(MARKER),
                Conversation.user_id.is_not(None),
            )
            .distinct()
        )
        await page.get_by_label("Find a person").fill(MARKER)
        await page.get_by_label("Find a person").press("Enter")
        people = page.get_by_role("list", name="People", exact=True).get_by_role("link")
        await expect(people).to_have_text(["Ana"])
        hrefs = await people.evaluate_all("els => els.map(e => e.getAttribute('href'))")
        await people.first.click()
        await expect(page.get_by_role("heading", name="Ana")).to_be_visible()
        await expect(page.locator("#live")).to_have_text("live")

        # Memory: an archive row down to a verbatim transcript, the chunk's own.
        await page.get_by_role("link", name="Memory").click()
        top = page.locator("details[data-chunk]").first
        while True:  # down the levels, to a level-0 row's transcript
            await top.locator("summary").first.click()
            inside = top.locator("pre.transcript, details[data-chunk]").first
            await expect(inside).to_be_visible()
            if await inside.evaluate("e => e.tagName") == "PRE":
                break
            top = inside
        shown_transcript = await top.locator("pre.transcript").text_content()
        chunk_id = int(await top.get_attribute("data-chunk") or 0)
        stored_transcript = await d.one(select(Chunk.transcript).where(Chunk.id == chunk_id))

        # A profile line's evidence opens the very message its evidence names.
        evidence = (await Profiles(d.world.sessions).get(ana.user_id)).sources[0][0]
        [seq] = evidence.seqs
        evidence_chunk = await d.one(
            select(Chunk.conversation_id).where(Chunk.id == evidence.chunk_id)
        )
        cited = await d.one(
            select(Message.text).where(
                Message.conversation_id == ana.conversation_id, Message.seq == seq
            )
        )
        line = page.locator("li[data-line='1']")
        await line.get_by_role("link", name=f"from message #{seq}").click()
        focused = page.locator("li.message.focus")
        await expect(focused).to_have_attribute("data-seq", str(seq))
        await expect(focused).to_contain_text(cited or "(none)")

    assert {str(owner) for owner in owners} == {str(ana.user_id)}
    assert hrefs == [f"#/people/{ana.user_id}"]
    assert shown_transcript == stored_transcript
    assert stored_transcript
    assert f"{MARKER} number" in stored_transcript
    assert evidence_chunk == ana.conversation_id


async def test_profile_edits_search_lookups_and_erasure_are_checked_in_the_database(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    changes = _changes(page)
    dialogs = Dialogs(page)
    async with dashboard(database_url, tmp_path, llm, page) as d:
        ana = d.world.ana
        profiles = Profiles(d.world.sessions)
        await sign_in(page, d.url)
        await page.goto(f"{d.url}/admin#/people/{ana.user_id}/memory")

        # An edit goes in, on record as an operator's; one against an older revision is
        # refused and the page shows the profile as it is now.
        await page.locator("li[data-line='2']").get_by_role("button", name="Edit").click()
        await page.get_by_label("Line 2").fill("lives by a lake")
        await page.get_by_role("button", name="Save").click()
        await expect(page.locator("#toast")).to_have_text("Profile saved.")
        edited = (await profiles.get(ana.user_id)).lines
        newest = page.get_by_role("list", name="Profile changes").get_by_role("listitem").first
        await expect(newest).to_contain_text("operator")
        await expect(newest).to_contain_text("+ lives by a lake")
        await page.locator("li[data-line='2']").get_by_role("button", name="Edit").click()
        view = await profiles.get(ana.user_id)
        meanwhile = await d.api(
            "PATCH",
            f"/users/{ana.user_id}/profile",
            json={"edits": [{"replace": [1], "with": "likes soup"}]},
            headers={"If-Match": f'"profile-{view.revision}"'},
        )
        await page.get_by_label("Line 2").fill("by a lake")
        await page.get_by_role("button", name="Save").click()
        await expect(page.locator("#toast")).to_contain_text("changed meanwhile")
        await expect(page.locator("li[data-line='1']")).to_contain_text("likes soup")
        after_stale = (await profiles.get(ana.user_id)).lines

        # Remove: the line leaves the profile and joins the retired facts, as listed.
        await page.locator("li[data-line='1']").get_by_role("button", name="Remove").click()
        await expect(page.locator("li[data-line]")).to_have_count(1)
        after_remove = (await profiles.get(ana.user_id)).lines
        retired = [
            (fact.text, fact.reason)
            for fact in await d.rows(
                select(RetiredFact)
                .where(RetiredFact.user_id == ana.user_id)
                .order_by(RetiredFact.id)
            )
        ]
        listed = page.get_by_role("list", name="Retired facts").get_by_role("listitem")
        await expect(listed).to_have_count(len(retired))
        shown_retired = await listed.evaluate_all(
            "els => els.map(e => [e.querySelector('.fact').textContent, e.dataset.reason])"
        )

        # What the recall tools looked up, as stored; what each read, word for word.
        lookups = await d.rows(select(Lookup).where(Lookup.conversation_id == ana.conversation_id))
        shown_lookups = page.get_by_role("list", name="Lookups").get_by_role("listitem")
        await expect(shown_lookups).to_have_count(len(lookups))
        await shown_lookups.first.get_by_text("what it read").click()
        read = await shown_lookups.first.locator("pre").text_content()

        # Search: the words of one message find it; its link opens it.
        wanted = f"{MARKER} number 7 {FILLER}"
        found_seq = await d.one(
            select(Message.seq).where(
                Message.conversation_id == ana.conversation_id, Message.text == wanted
            )
        )
        await page.get_by_label("Words").fill(f"{MARKER} number 7")
        await page.get_by_label("Words").press("Enter")
        hits = page.get_by_role("list", name="Search results")
        await hits.get_by_role("link", name=f"message #{found_seq}", exact=True).click()
        await expect(page.locator("li.message.focus")).to_have_attribute("data-seq", str(found_seq))
        await expect(page.locator("li.message.focus")).to_contain_text(wanted)

        # Erasing asks first; saying no changes nothing.
        await page.get_by_role("link", name="Memory").click()
        erase = page.get_by_role("button", name="Erase this person")
        files_before = files_with(tmp_path / "archive", MARKER)
        messages_before = await _count(d, Message.conversation_id == ana.conversation_id)
        await erase.click()
        await expect(erase).to_be_enabled()
        asked = list(dialogs.asked)
        kept = await d.one(select(User.id).where(User.id == ana.user_id))
        messages_kept = await _count(d, Message.conversation_id == ana.conversation_id)
        changes_when_dismissed = list(changes)

        dialogs.accept = True
        await erase.click()
        await expect(page.get_by_role("heading", name="People", exact=True)).to_be_visible()
        gone = {
            "user": await _count(d, User.id == ana.user_id, table=User),
            "own messages": await _count(d, Message.conversation_id == ana.conversation_id),
            "typed anywhere": await _count(
                d, Message.identity_id.in_([ana.identity_id, d.world.ana_discord])
            ),
            "with her word": await _count(d, Message.text.contains(MARKER)),
            "chunks": await _count(d, Chunk.conversation_id == ana.conversation_id, table=Chunk),
            "chunks with her word": await _count(d, Chunk.transcript.contains(MARKER), table=Chunk),
            "profile": await _count(d, Profile.user_id == ana.user_id, table=Profile),
            "retired facts": await _count(d, RetiredFact.user_id == ana.user_id, table=RetiredFact),
        }
        jobs = (await d.api("GET", "/jobs", params={"limit": 200})).json()["items"]
        files_after = files_with(tmp_path / "archive", MARKER)
        folder = (tmp_path / "archive" / str(ana.conversation_id)).exists()

    assert edited[1] == "lives by a lake"
    assert meanwhile.status_code == 200, meanwhile.text
    assert list(after_stale) == ["likes soup", "lives by a lake"]
    assert list(after_remove) == ["lives by a lake"]
    assert ("likes soup", "removed") in retired
    assert [tuple(fact) for fact in shown_retired] == retired
    assert [(lk.tool, lk.arguments) for lk in lookups] == [("archive_search", '{"query": "soup"}')]
    assert read == lookups[0].result
    assert len(asked) == 1
    assert "cannot be undone" in asked[0]
    assert kept == ana.user_id
    assert messages_kept == messages_before > 0
    assert [c for c in changes_when_dismissed if "DELETE" in c] == []
    assert files_before, "the scan must see her transcripts before"
    assert gone == dict.fromkeys(gone, 0)
    assert [j for j in jobs if j["user_id"] == str(ana.user_id)] == []
    assert [j for j in jobs if j["conversation_id"] == str(ana.conversation_id)] == []
    assert files_after == []
    assert not folder


async def _count(d: Dashboard, *where: Any, table: Any = Message) -> int:
    return int(await d.one(select(func.count()).select_from(table).where(*where)) or 0)


async def test_unlink_and_merge_ask_first_and_saying_no_changes_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    changes = _changes(page)
    dialogs = Dialogs(page)
    async with dashboard(database_url, tmp_path, llm, page) as d:
        world = d.world
        owner = select(Identity.user_id).where(Identity.id == world.ana_discord)
        await sign_in(page, d.url)
        await page.goto(f"{d.url}/admin#/people/{world.ana.user_id}/memory")
        discord = page.locator(f"li[data-identity='{world.ana_discord}']")
        unlink = discord.get_by_role("button", name="Unlink")
        await dialogs.dismissed(unlink)
        await page.get_by_label("Merge another person into this one").fill("Bo")
        await page.get_by_role("button", name="Find").click()
        await dialogs.dismissed(page.get_by_role("button", name="Merge Bo into Ana"))
        asked = list(dialogs.asked)
        dismissed = {
            "discord's owner": await d.one(owner),
            "bo": await d.one(select(User.id).where(User.id == world.bo.user_id)),
            "bo's owner": await d.one(
                select(Identity.user_id).where(Identity.id == world.bo.identity_id)
            ),
        }
        changes_when_dismissed = list(changes)

        dialogs.accept = True
        await unlink.click()
        await expect(page.locator(f"li[data-identity='{world.ana_discord}']")).to_have_count(0)
        await page.get_by_label("Merge another person into this one").fill("Bo")
        await page.get_by_role("button", name="Find").click()
        await page.get_by_role("button", name="Merge Bo into Ana").click()
        await expect(page.locator("li[data-identity]")).to_have_count(2)
        accepted = {
            "discord's owner": await d.one(owner),
            "bo": await d.one(select(User.id).where(User.id == world.bo.user_id)),
            "bo's owner": await d.one(
                select(Identity.user_id).where(Identity.id == world.bo.identity_id)
            ),
        }

    assert len(asked) == 2
    assert "a person of its own" in asked[0]
    assert "part of Ana" in asked[1]
    assert dismissed == {
        "discord's owner": world.ana.user_id,
        "bo": world.bo.user_id,
        "bo's owner": world.bo.user_id,
    }
    assert changes_when_dismissed == []
    assert accepted["discord's owner"] not in (None, world.ana.user_id)  # a person of its own
    assert accepted["bo"] is None  # all of Bo is Ana's now: no empty person is left
    assert accepted["bo's owner"] == world.ana.user_id


async def test_a_delivery_that_moves_on_while_its_message_is_being_read_is_shown(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    line = WatchedLine(r"/admin/live\b")
    await line.install(page)
    async with dashboard(database_url, tmp_path, llm, page) as d:
        world = d.world
        await sign_in(page, d.url)
        await page.goto(f"{d.url}/admin#/people/{world.bo.user_id}")
        await expect(page.locator("#live")).to_have_text("live")
        line.forget("delivery")
        await d.p.telegram(tg.text_update(300, "Bo writes on Telegram"))
        await line.reached("delivery")  # the answer's, sent: Bo is reached on Telegram
        read, release = asyncio.Event(), asyncio.Event()

        async def slow(route: Route) -> None:
            # The read that a new message's ring starts: answered as the database had
            # it then (pending), once its delivery has moved on and rung.
            response = await route.fetch()
            read.set()
            await release.wait()
            await route.fulfill(response=response)

        await page.route("**/messages?limit=100&after_seq=*", slow)
        d.p.tg.gate = asyncio.Event()  # Telegram answers once the page has read
        line.forget("delivery")
        posted = await d.api(
            "POST",
            f"/sessions/{world.bo.conversation_id}/messages",
            json={"text": "An operator, while the page reads", "channel": "telegram"},
        )
        await asyncio.wait_for(read.wait(), 10)
        d.p.tg.gate.set()
        await line.reached("delivery")  # sent, and the page told, before its read is in
        release.set()
        shown = page.locator("li.message").filter(has_text="An operator, while the page reads")
        await expect(shown).to_have_attribute("data-delivery", "sent")

    assert posted.status_code == 201, posted.text
    assert "An operator, while the page reads" in d.p.tg.texts(300)


async def test_a_new_message_appears_live_also_after_the_socket_came_back(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    line = Line(r"/admin/live\b")
    await line.install(page)
    async with dashboard(database_url, tmp_path, llm, page) as d:
        world = d.world
        await sign_in(page, d.url)
        await page.goto(f"{d.url}/admin#/people/{world.bo.user_id}")
        await expect(page.locator("#live")).to_have_text("live")
        await d.p.telegram(tg.text_update(300, "Bo says hello live"))
        messages = page.locator("li.message")
        await expect(messages.filter(has_text="Bo says hello live")).to_have_count(1)

        await line.cut(stay_down=True)
        await expect(page.locator("#live")).to_have_text("reconnecting…")
        await d.p.telegram(tg.text_update(300, "said while the socket was down"))
        await d.p.tg.wait_until(lambda f: len(f.texts(300)) >= 2)
        line.up = True
        await expect(page.locator("#live")).to_have_text("live")
        await expect(messages.filter(has_text="said while the socket was down")).to_have_count(1)

        # An operator writes in: labelled as such, stored, delivered on Telegram.
        await page.get_by_label("Message from an operator").fill("An operator here: all fine?")
        await page.get_by_role("button", name="Send").click()
        sent = messages.filter(has_text="An operator here: all fine?")
        await expect(sent).to_contain_text("[source: operator via REST]")
        await d.p.tg.wait_until(lambda f: "An operator here: all fine?" in f.texts(300))
        await expect(sent).to_have_attribute("data-delivery", "sent")
        seqs = await messages.evaluate_all("els => els.map(e => Number(e.dataset.seq))")
        stored = await d.rows(
            select(Message.seq)
            .where(Message.conversation_id == world.bo.conversation_id)
            .order_by(Message.seq)
        )

    assert seqs == stored  # every message of the conversation, in order, once


async def test_nothing_without_a_session_no_change_without_the_csrf_token_no_other_origin(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, browser: Browser
) -> None:
    async with dashboard(database_url, tmp_path, llm, page) as d:
        url = d.url
        stranger = await browser.new_context()
        guard = OwnOrigin(url)
        await guard.install(stranger)
        try:
            anonymous = await stranger.new_page()
            pages = {}
            for path in ("/admin", "/admin#/operations", "/admin#/health"):
                await anonymous.goto(url + path)
                pages[path] = anonymous.url
            api = await stranger.request.get(url + "/api/v1/users")
            socket_refused = await anonymous.evaluate(
                """url => new Promise(done => {
                    const ws = new WebSocket(url);
                    ws.onclose = e => done(e.code);
                })""",
                url.replace("http", "ws") + f"/admin/live?session={d.world.bo.conversation_id}",
            )
            signin_page = await anonymous.goto(url + "/admin/signin")
        finally:
            await stranger.close()

        await sign_in(page, url)
        request = page.context.request
        dashboard_page = await request.get(url + "/admin")
        forged = await request.delete(url + f"/api/v1/users/{d.world.bo.user_id}")
        forged_signout = await request.delete(url + "/admin/session")
        still = await d.one(select(User.id).where(User.id == d.world.bo.user_id))
        cookies = await page.context.cookies()

    assert {landed.split("#")[0] for landed in pages.values()} == {url + "/admin/signin"}
    assert api.status == 401
    assert socket_refused == 4401
    assert forged.status == 403
    assert forged_signout.status == 403
    assert still == d.world.bo.user_id
    assert guard.foreign == []
    [cookie] = [c for c in cookies if c["name"] == "parley_operator"]
    assert cookie["httpOnly"] is True
    assert cookie["secure"] is True
    assert cookie["sameSite"] == "Strict"
    assert signin_page is not None
    for policy in (
        signin_page.headers["content-security-policy"],
        dashboard_page.headers["content-security-policy"],
    ):
        assert _sources(policy) <= {"'self'", "'none'", "data:", "blob:"}, policy
        assert "frame-ancestors 'none'" in policy
        # Object URLs (files read with the session) for images and audio, nothing else.
        with_blob = {d.split()[0] for d in policy.split(";") if "blob:" in d.split()}
        assert with_blob <= {"img-src", "media-src"}, policy


def _sources(policy: str) -> set[str]:
    """Every source a Content-Security-Policy allows, whatever the directive."""
    return {source for directive in policy.split(";") for source in directive.split()[1:]}
