"""The widget on another site, in headless Chromium: one tag adds a launcher and the
chat in a frame from Parley's origin; a host the gateway does not list cannot frame it;
the host's CSS cannot reach the panel.

Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from axe_playwright_python.async_playwright import Axe
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from playwright.async_api import Browser, FloatRect, Frame, Page, expect

from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.harness import Gateway, make_settings, running_gateway
from tests.support.platforms import ADMIN, platform_gateway
from tests.support.polling import eventually
from tests.support.servers import serve
from tests.support.webpage import TIMEOUT_MS, HoldingLine, Line, csp_violations, screenshot

# The fixtures `chromium`, `browser` and `page`.
pytest_plugins = ["tests.support.browser"]


pytestmark = pytest.mark.browser

# A host page as careless (or hostile) as they come, around the one tag. It records
# every message the page is posted (so a test can see that no token reaches it).
# The secret the shop signs its users' identity tokens with.
SECRET = "site-identity-secret-0123456789abcdef"
HOSTILE_CSS = (
    "* { all: unset !important; font-size: 40px !important; } iframe { width: 10px !important; }"
)
HOST_PAGE = """<!doctype html>
<html><head><title>Shop</title>
<style>{css}</style>
</head><body><p>Our shop</p>
<script>window.heard = [];
window.addEventListener("message", e => window.heard.push(e.data));
window.Parley = window.Parley || {{ q: [] }};
["open", "close", "identify", "on"].forEach(n => window.Parley[n] = window.Parley[n] ||
  ((...a) => window.Parley.q.push([n, ...a])));
window.Parley.on("message", m => (window.seen = (window.seen || []).concat([m])));
window.Parley.on("unread", u => (window.unread = u.count));
window.Parley.on("expired", () => (window.expired = (window.expired || 0) + 1));</script>
<script src="{gateway}/webchat/widget.js" data-title="Shop chat" {attributes} async></script>
</body></html>"""


@contextlib.asynccontextmanager
async def host_site(
    gateway: dict[str, str], *, other_site: bool = False, attributes: str = ""
) -> AsyncIterator[str]:
    """A site on an origin of its own; its page `/` embeds the gateway named later under
    hostile CSS, `/plain` without it. `attributes`: more of the script tag's attributes.

    `other_site`: on `localhost` rather than the gateway's 127.0.0.1, another site to the
    browser, which then gives the gateway's frame no storage (third-party storage)."""
    app = FastAPI()

    def page(css: str) -> str:
        return HOST_PAGE.format(gateway=gateway["url"], css=css, attributes=attributes)

    @app.get("/", response_class=HTMLResponse)
    async def home() -> str:
        return page(HOSTILE_CSS)

    @app.get("/plain", response_class=HTMLResponse)
    async def plain() -> str:
        return page("")

    async with serve(app) as url:
        yield url.replace("127.0.0.1", "localhost") if other_site else url


@contextlib.asynccontextmanager
async def shop_and_gateway(
    database_url: str,
    tmp_path: Path,
    llm: FakeLLM,
    *,
    other_site: bool = False,
    attributes: str = "",
    **extra: Any,
) -> AsyncIterator[tuple[str, Gateway]]:
    """The shop's site, and a gateway that lets it embed the widget and takes the
    identity tokens it signs."""
    gateway: dict[str, str] = {}
    async with host_site(gateway, other_site=other_site, attributes=attributes) as shop:
        settings = make_settings(
            database_url,
            tmp_path,
            llm,
            webchat_allowed_origins=shop,
            webchat_identity_secret=SECRET,
            **extra,
        )
        async with running_gateway(settings) as gw:
            gateway["url"] = gw.url
            yield shop, gw


def _identity_token(sub: str, *, seconds: int = 600, name: str | None = None) -> str:
    """What the shop signs for its logged-in user `sub`, valid for `seconds` from now."""
    claims: dict[str, Any] = {"sub": sub, "exp": int(time.time()) + seconds}
    if name is not None:
        claims["name"] = name
    return jwt.encode(claims, SECRET, algorithm="HS256")


async def _say(frame: Frame, text: str) -> None:
    box = frame.get_by_label("Message")
    await box.fill(text)
    await box.press("Enter")


async def _frame(page: Page) -> Frame:
    """The widget's frame (in a closed shadow root: found among the page's frames)."""

    async def find() -> Frame | None:
        return next((f for f in page.frames if "/webchat/frame" in f.url), None)

    found = await eventually(find, until=lambda f: f is not None)
    assert found is not None
    return found


async def _open_by_keyboard(page: Page) -> Frame:
    frame = await _frame(page)
    await expect(frame.locator("#text")).to_be_attached()
    await page.keyboard.press("Tab")  # the launcher is the page's first stop
    await page.keyboard.press("Enter")
    await expect(frame.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)
    return frame


async def test_the_widget_on_an_allowed_site_chats_and_keeps_its_history(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    llm.script(Reply("Hello from the shop's assistant."))
    gateway: dict[str, str] = {}
    async with host_site(gateway) as shop:
        settings = make_settings(database_url, tmp_path, llm, webchat_allowed_origins=shop)
        async with running_gateway(settings) as gw:
            gateway["url"] = gw.url
            await page.goto(shop + "/")
            frame = await _open_by_keyboard(page)
            box = frame.get_by_label("Message")
            await expect(box).to_be_focused()
            await box.fill("do you ship to Lyon?")
            await box.press("Enter")
            assistant = frame.locator(".msg.assistant:not(.draft)")
            await expect(assistant).to_have_text("Hello from the shop's assistant.")
            element = await frame.frame_element()
            size = await element.bounding_box()
            # New messages are read out: they land in the log, a polite live region.
            log = frame.get_by_role("log", name="Conversation")
            await expect(log).to_have_attribute("aria-live", "polite")
            await expect(log).to_contain_text("Hello from the shop's assistant.")

            async def seen_by_host() -> list[str]:
                roles: list[str] = await page.evaluate("(window.seen || []).map(m => m.role)")
                return roles

            # Told by messages of their own, which may land after the reply is shown.
            seen = await eventually(seen_by_host, until=lambda roles: len(roles) >= 2)
            # Artifacts to look at: the open panel, wide and at 360 px.
            await screenshot(page, artifacts / "widget-desktop.png")
            await page.set_viewport_size({"width": 360, "height": 740})
            await screenshot(page, artifacts / "widget-360.png")
            narrow = await element.bounding_box()
            await frame.get_by_label("Message").press("Escape")
            # The frame asks the page to close it by a message: wait for the page to act.
            hidden = await eventually(element.is_hidden, until=bool)
            # The focus is back on the launcher: Enter opens the chat again.
            await page.keyboard.press("Enter")
            reopened = await eventually(element.is_visible, until=bool)
            await expect(box).to_be_focused()
            # The frame has storage of its own: the token stays there, never the host's.
            storage = await frame.locator("html").get_attribute("data-storage")
            heard = json.dumps(await page.evaluate("window.heard"))
            host_storage = await _host_storage(page)
            token = await _frame_token(frame)

            await page.reload()
            again = await _open_by_keyboard(page)
            # The history arrives after the socket is up: waited for, not read at once.
            await expect(again.locator(".msg")).to_have_count(2)
            history = await again.locator(".msg").all_text_contents()
            title = await again.locator("header").text_content()
            await again.get_by_role("button", name="Close chat").click()
            closed = await eventually((await again.frame_element()).is_hidden, until=bool)

    assert size is not None
    assert 300 <= size["width"] <= 400  # the host's `iframe { width: 10px }` did not apply
    assert narrow is not None
    assert narrow["width"] == 360  # the panel takes the whole of a phone's width
    assert seen[:2] == ["user", "assistant"]
    assert hidden
    assert reopened
    assert storage == "frame"
    assert token not in heard
    assert "parley:keep" not in heard
    assert host_storage == {}
    assert history == ["do you ship to Lyon?", "Hello from the shop's assistant."]
    assert title is not None
    assert title.startswith("Shop chat")
    assert closed


async def test_a_site_the_gateway_does_not_list_cannot_frame_it(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    gateway: dict[str, str] = {}
    async with host_site(gateway) as stranger:
        settings = make_settings(database_url, tmp_path, llm)
        async with running_gateway(settings) as gw:
            gateway["url"] = gw.url
            refused = csp_violations(page)

            async def violations() -> list[str]:
                return refused

            await page.goto(stranger + "/")
            await eventually(violations, until=bool)
            chats = [await f.locator("#log").count() for f in page.frames[1:]]

    assert any("frame-ancestors" in message for message in refused), refused
    assert sum(chats) == 0


async def test_identified_on_two_devices_one_conversation_and_nobody_elses(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, browser: Browser
) -> None:
    llm.script(Reply("Noted, Ada."))
    async with shop_and_gateway(database_url, tmp_path, llm) as (shop, gw):
        phone = await _identified(page, shop, _identity_token("ada", name="Ada"))
        await _say(phone, "my parcel number is 77")
        await expect(phone.locator(".msg.assistant:not(.draft)")).to_have_text("Noted, Ada.")
        laptop_context = await browser.new_context()
        stranger_context = await browser.new_context()
        try:
            laptop = await _identified(
                await laptop_context.new_page(), shop, _identity_token("ada")
            )
            await expect(laptop.locator(".msg")).to_have_count(2)
            on_laptop = await laptop.locator(".msg").all_text_contents()
            stranger = await _identified(
                await stranger_context.new_page(), shop, _identity_token("bob")
            )
            # The stranger's history has come (a reply to their own words ends it) and
            # holds nothing of Ada's.
            await _say(stranger, "hello?")
            await expect(stranger.locator(".msg:not(.draft)")).to_have_count(2)
            for_stranger = await stranger.locator(".msg").all_text_contents()
            stranger_stored = [m["text"] for m in await gw.history(await _frame_token(stranger))]
        finally:
            await laptop_context.close()
            await stranger_context.close()

    assert on_laptop == ["my parcel number is 77", "Noted, Ada."]
    assert for_stranger == ["hello?", "reply 2"]
    assert stranger_stored == for_stranger


async def test_a_sign_in_that_runs_out_asks_the_site_and_goes_on_as_the_same_person(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with shop_and_gateway(database_url, tmp_path, llm) as (shop, gw):
        earlier = await gw.http.post(
            "/webchat/identify", json={"identity_token": _identity_token("ada")}
        )
        await gw.send(earlier.json()["token"], "said earlier")
        frame = await _identified(page, shop, _identity_token("ada", seconds=3))
        await expect(frame.locator(".msg.user")).to_have_text(["said earlier"])

        # The token runs out: the panel is hers no more, and the site is asked.
        await expect(frame.locator("#status")).to_have_text("signed out", timeout=TIMEOUT_MS)
        left = await frame.locator(".msg").all_text_contents()
        asked = await page.evaluate("window.expired")

        # The site signs her in again: her conversation goes on.
        await page.evaluate("t => window.Parley.identify(t)", _identity_token("ada"))
        await expect(frame.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)
        await _say(frame, "said after")
        await expect(frame.locator(".msg.user")).to_have_text(["said earlier", "said after"])
        await expect(frame.locator(".msg.assistant:not(.draft)")).to_have_count(2)
        stored = [m["text"] for m in await gw.history(await _frame_token(frame))]

    assert left == ["Your sign-in has expired."]
    assert asked == 1
    assert stored == ["said earlier", "reply 1", "said after", "reply 2"]


async def _identified(page: Page, shop: str, identity_token: str) -> Frame:
    """A visitor of the shop whom the shop signs in; their frame, once it is theirs."""
    await page.goto(shop + "/")
    frame = await _frame(page)
    await expect(frame.locator("#text")).to_be_attached()
    before = await frame.evaluate("localStorage.getItem('parley.webchat.token')")
    await page.evaluate("t => { window.Parley.identify(t); window.Parley.open(); }", identity_token)

    async def token_now() -> object:
        return await frame.evaluate("localStorage.getItem('parley.webchat.token')")

    await eventually(
        token_now, until=lambda t: isinstance(t, str) and t.startswith("wc2.") and t != before
    )
    await expect(frame.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)
    return frame


async def _launcher_name(page: Page) -> str:
    """The launcher's accessible name, as a screen reader is told it (the launcher is in
    a closed shadow root, which only the accessibility tree shows)."""
    cdp = await page.context.new_cdp_session(page)
    try:
        tree = await cdp.send("Accessibility.getFullAXTree")
    finally:
        await cdp.detach()
    names = [
        str(node.get("name", {}).get("value", ""))
        for node in tree["nodes"]
        if node.get("role", {}).get("value") == "button"
    ]
    return next(name for name in names if "Shop chat" in name)


async def test_a_reply_cut_off_mid_stream_arrives_whole_and_once_after_the_reconnect(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    midway = asyncio.Event()
    # Long enough that its first half streams (a shorter start is held back while the
    # model may still turn to its tools).
    answer = (
        "Your parcel left Lyon this morning and should arrive tomorrow. It travels with "
        "the regional carrier, who delivers between nine and noon; if nobody is home, "
        "they leave it at the post office on the corner, where it waits for a week. "
        "You will get a text message with the exact hour tomorrow morning."
    )
    llm.script(Reply(answer, pieces=6, midway=midway))
    line = Line()
    await line.install(page)
    async with shop_and_gateway(database_url, tmp_path, llm) as (shop, gw):
        await page.goto(shop + "/")
        frame = await _open_by_keyboard(page)
        await _say(frame, "where is my parcel?")
        draft = frame.locator(".msg.draft")
        await expect(draft).to_have_count(1)  # half the reply has streamed in
        streamed = await draft.text_content()

        await line.cut(stay_down=False)  # the server's end of the socket goes away
        midway.set()
        await expect(frame.locator("#status")).to_have_text("online")
        await expect(frame.locator(".msg:not(.draft)")).to_have_text(
            ["where is my parcel?", answer]
        )
        await expect(frame.locator(".draft")).to_have_count(0)
        seqs = await frame.locator(".msg").evaluate_all("els => els.map(e => e.dataset.seq)")
        stored = [m["text"] for m in await gw.history(await _frame_token(frame))]

    assert streamed
    assert answer.startswith(streamed)
    assert streamed != answer
    assert seqs == ["1", "2"]
    assert stored == ["where is my parcel?", answer]
    assert len(llm.requests) == 1


async def test_typing_then_sending_states_and_a_message_written_offline_is_sent_once(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("First answer.", gate=gate), Reply("Second answer."))
    line = Line()
    await line.install(page)
    async with shop_and_gateway(database_url, tmp_path, llm) as (shop, gw):
        await page.goto(shop + "/")
        frame = await _open_by_keyboard(page)
        box = frame.get_by_label("Message")
        await box.fill("hello")
        await box.press("Enter")
        typing = frame.get_by_role("status", name="The assistant is writing")
        await expect(typing).to_be_visible()  # the model is asked and held
        gate.set()
        await expect(frame.locator(".msg:not(.draft)")).to_have_text(["hello", "First answer."])
        await expect(typing).to_be_hidden()

        await line.cut(stay_down=True)
        await expect(frame.locator("#status")).to_have_text("reconnecting…")
        await box.fill("written on the train")
        await box.press("Enter")
        offline = frame.locator(".msg.user").last
        await expect(offline).to_have_attribute("data-state", "sending")
        await screenshot(page, artifacts / "widget-sending.png")
        line.up = True
        await expect(frame.locator(".msg:not(.draft)")).to_have_text(
            ["hello", "First answer.", "written on the train", "Second answer."]
        )
        state = await offline.get_attribute("data-state")
        stored = [m["text"] for m in await gw.history(await _frame_token(frame))]

    assert state is None
    assert stored == ["hello", "First answer.", "written on the train", "Second answer."]


async def test_the_unread_badge_counts_from_where_the_person_stopped_reading(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    async with shop_and_gateway(database_url, tmp_path, llm) as (shop, gw):
        await page.goto(shop + "/")
        frame = await _open_by_keyboard(page)
        await _say(frame, "hi")
        await expect(frame.locator(".msg:not(.draft)")).to_have_text(["hi", "reply 1"])
        await frame.get_by_label("Message").press("Escape")
        read_all = await _unread(page, until=lambda n: n == 0)

        # From the visitor's other tab: their own words are not news, the reply is.
        token = await _frame_token(frame)
        assert (await gw.send(token, "from my other tab")).status_code == 200
        one = await _unread(page, until=lambda n: n == 1)
        name = await _launcher_name(page)
        await screenshot(page, artifacts / "widget-badge.png")

        await page.reload()  # the count comes from the server, not this page's memory
        after_reload = await _unread(page, until=lambda n: n == 1)
        frame = await _open_by_keyboard(page)
        opened = await _unread(page, until=lambda n: n == 0)
        await page.reload()
        await _frame(page)
        settled = await _unread(page, until=lambda n: n == 0)
        name_after = await _launcher_name(page)

    assert (read_all, one, after_reload, opened, settled) == (0, 1, 1, 0, 0)
    assert name == "Open Shop chat (1 unread)"
    assert name_after == "Open Shop chat"


async def test_where_the_frame_has_no_storage_the_host_page_keeps_the_token(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    sessions: list[str] = []
    page.on(
        "request",
        lambda r: sessions.append(r.url) if r.url.endswith("/webchat/sessions") else None,
    )
    async with shop_and_gateway(database_url, tmp_path, llm, other_site=True) as (shop, gw):
        await page.goto(shop + "/")
        frame = await _frame(page)
        await expect(frame.locator("html")).to_have_attribute("data-storage", "host")
        before_opening = (await _host_storage(page), list(sessions))
        frame = await _open_by_keyboard(page)
        await _say(frame, "remember me")
        await expect(frame.locator(".msg:not(.draft)")).to_have_text(["remember me", "reply 1"])
        kept = await _host_storage(page)

        await page.reload()
        again = await _open_by_keyboard(page)
        # The history arrives after the socket is up: waited for, not read at once.
        await expect(again.locator(".msg")).to_have_text(["remember me", "reply 1"])

    assert before_opening == ({}, [])  # a page view alone starts nothing and stores nothing
    assert list(kept) == [f"parley.webchat.token@{gw.url}"]
    assert len(sessions) == 1


async def test_a_telegram_message_of_a_linked_person_appears_in_the_open_panel(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    ada = _identity_token("ada")
    gateway: dict[str, str] = {}
    async with (
        host_site(gateway) as shop,
        platform_gateway(
            database_url,
            tmp_path,
            llm,
            webchat_allowed_origins=shop,
            webchat_identity_secret=SECRET,
        ) as p,
    ):
        gateway["url"] = p.gw.url
        await p.telegram(tg.text_update(1111111, "hello from Telegram"))
        await p.tg.wait_until(lambda f: f.texts(1111111) == ["reply 1"])
        signed_in = await p.gw.http.post("/webchat/identify", json={"identity_token": ada})
        assert signed_in.status_code == 200, signed_in.text
        people = (await p.gw.http.get("/api/v1/users", headers=ADMIN)).json()["items"]
        by_channel = {i["channel"]: u["id"] for u in people for i in u["identities"]}
        merged = await p.gw.http.post(
            f"/api/v1/users/{by_channel['webchat']}/merge",
            json={"other_user_id": by_channel["telegram"]},
            headers=ADMIN,
        )
        assert merged.status_code == 200, merged.text

        frame = await _identified(page, shop, ada)
        await expect(frame.locator(".msg")).to_have_count(2)
        await p.telegram(tg.text_update(1111111, "on the bus now"))
        # The reply may show first as a draft (deltas carry no channel), then as stored.
        await expect(frame.locator(".msg")).to_have_text(
            [
                "hello from Telegramvia telegram",
                "reply 1via telegram",
                "on the bus nowvia telegram",
                "reply 2via telegram",
            ]
        )
        await expect(frame.locator(".msg .via")).to_have_text(["via telegram"] * 4)
        await screenshot(page, artifacts / "widget-telegram.png")


async def test_the_demo_at_the_root_is_the_widget_under_a_strict_policy(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    refused = csp_violations(page)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await page.goto(gw.url + "/")
        snippet = await page.locator("pre code").text_content()
        frame = await _frame(page)
        await expect(frame.locator("#text")).to_be_attached()
        await page.evaluate("window.Parley.open()")
        await expect(frame.locator(".greeting")).to_have_text("Hello! Ask me anything.")
        await _say(frame, "hi")
        await expect(frame.locator(".msg:not(.draft)")).to_have_text(["hi", "reply 1"])
        await screenshot(page, artifacts / "demo.png")

    assert snippet == f'<script src="{gw.url}/webchat/widget.js" data-title="Help" async></script>'
    assert refused == []


async def _frame_token(frame: Frame) -> str:
    token = await frame.evaluate("localStorage.getItem('parley.webchat.token')")
    assert isinstance(token, str)
    return token


async def _host_storage(page: Page) -> dict[str, str]:
    stored: dict[str, str] = await page.evaluate("({...localStorage})")
    return stored


async def _unread(page: Page, until: Callable[[int], bool]) -> int:
    """The unread count the widget last told the host page, once `until` holds."""

    async def told() -> object:
        return await page.evaluate("window.unread")

    count = await eventually(told, until=lambda n: isinstance(n, int) and until(n))
    assert isinstance(count, int)
    return count


async def test_the_host_pages_css_changes_neither_the_launcher_nor_the_panel(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    await page.emulate_media(reduced_motion="reduce")  # nothing moves between the pictures
    async with shop_and_gateway(database_url, tmp_path, llm) as (shop, _gw):

        async def looks(path: str) -> tuple[bytes, FloatRect | None]:
            """The launcher's pixels, and where the open panel is, on `path`."""
            await page.goto(shop + path)
            frame = await _frame(page)
            await expect(frame.locator("#text")).to_be_attached()
            size = page.viewport_size
            assert size is not None
            corner = FloatRect(x=size["width"] - 88, y=size["height"] - 88, width=88, height=88)
            launcher = await page.screenshot(clip=corner)
            await page.evaluate("window.Parley.open()")
            element = await frame.frame_element()
            await expect(frame.get_by_label("Message")).to_be_focused()
            return launcher, await element.bounding_box()

        plain = await looks("/plain")
        hostile = await looks("/")

    assert hostile[1] is not None
    assert hostile[1]["width"] > 300
    assert hostile == plain


async def test_calls_made_before_the_frame_has_loaded_reach_it(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    """`identify()` the moment the script has run, while its frame is still loading; and
    the tag's options: open at once, on the left, in a light colour."""
    ada = _identity_token("ada")
    await page.add_init_script(f"window.TOKEN = {json.dumps(ada)}")
    attributes = (
        'data-open data-position="left" data-color="#fde047" '
        'onload="window.Parley.identify(window.TOKEN)"'
    )
    async with shop_and_gateway(database_url, tmp_path, llm, attributes=attributes) as (
        shop,
        gw,
    ):
        signed_in = await gw.http.post("/webchat/identify", json={"identity_token": ada})
        await gw.send(signed_in.json()["token"], "written on my phone")

        await page.goto(shop + "/plain")
        frame = await _frame(page)
        await expect(frame.locator(".msg")).to_have_text(["written on my phone", "reply 1"])
        token = await _frame_token(frame)
        box = await (await frame.frame_element()).bounding_box()
        ink = await _widget_style(page, "launcher", "color")

    assert token.startswith("wc2.")  # an identified visitor's token
    assert box is not None
    assert box["x"] == 16  # data-position="left"
    assert ink == "rgb(17, 17, 17)"  # dark on a light yellow, not white


async def test_a_reconnect_resumes_from_the_last_message_shown_not_from_an_ack(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    """The server may ack a message before an earlier one (written elsewhere) has reached
    the page; a socket lost just then must still bring that earlier one."""
    line = HoldingLine()
    await line.install(page)
    async with shop_and_gateway(database_url, tmp_path, llm) as (shop, gw):
        await page.goto(shop + "/")
        frame = await _open_by_keyboard(page)
        await _say(frame, "hi")
        await expect(frame.locator(".msg:not(.draft)")).to_have_text(["hi", "reply 1"])

        line.holding = True
        token = await _frame_token(frame)
        assert (await gw.send(token, "from my other tab")).status_code == 200  # seqs 3, 4
        await _say(frame, "and from here")  # seq 5: its ack comes through
        await expect(frame.locator(".msg.user").last).not_to_have_attribute("data-state", "sending")
        held = len(line.held)
        await line.cut(stay_down=False)
        await expect(frame.locator(".msg:not(.draft)")).to_have_text(
            ["hi", "reply 1", "from my other tab", "reply 2", "and from here", "reply 3"]
        )
        seqs = await frame.locator(".msg").evaluate_all("els => els.map(e => e.dataset.seq)")

    assert held >= 2  # 3 and 4 were held back when the socket went
    assert seqs == ["1", "2", "3", "4", "5", "6"]


async def test_refusals_and_limits_are_said_in_the_panel(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    expired = _identity_token("ada", seconds=-3600)
    async with shop_and_gateway(
        database_url,
        tmp_path,
        llm,
        webchat_policy="pairing",
        webchat_messages_per_minute=1,
    ) as (shop, gw):
        await page.goto(shop + "/")
        frame = await _open_by_keyboard(page)
        notes = frame.locator(".msg.event")
        await page.evaluate("t => window.Parley.identify(t)", expired)
        await expect(notes.last).to_have_text(
            "Sign-in refused: the identity token has expired: ask the site for a new one"
        )
        await _say(frame, "let me in")
        await expect(notes.last).to_contain_text("Your pairing code is")
        await _say(frame, "please?")
        await expect(notes.last).to_have_text("too many messages; try again in a moment")
        kept = await frame.get_by_label("Message").input_value()
        stored = await gw.history(await _frame_token(frame))

    assert kept == "please?"  # what was refused goes back into the box
    assert stored == []  # and nothing of it was stored


async def test_the_panel_passes_an_accessibility_check_in_light_and_dark(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    llm.script(Reply("Here is **bold**, a [link](https://example.org) and `code`.\n\n- one"))
    async with shop_and_gateway(database_url, tmp_path, llm) as (shop, _gw):
        await page.goto(shop + "/")
        frame = await _open_by_keyboard(page)
        await _say(frame, "show me everything")
        await expect(frame.locator(".msg.assistant:not(.draft)")).to_contain_text("Here is")
        found: dict[str, list[str]] = {}
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
            results = await Axe().run(frame)
            found[scheme] = [
                f"{v['id']}: {[n['target'] for n in v['nodes']]}"
                for v in results.response["violations"]
            ]
            await screenshot(page, artifacts / f"widget-{scheme}.png")
        background = await frame.evaluate("getComputedStyle(document.body).backgroundColor")
        # With reduced motion the panel opens without moving; else it rises.
        animation = {}
        for motion in ("reduce", "no-preference"):
            await page.emulate_media(reduced_motion=motion)
            animation[motion] = await _widget_style(page, "panel", "animation-name")

    assert found == {"light": [], "dark": []}
    assert background != "rgb(255, 255, 255)"  # dark, as asked
    assert animation == {"reduce": "none", "no-preference": "rise"}


async def _widget_style(page: Page, part: str, prop: str) -> str:
    """A computed style of the widget's `part` (its class: `panel`, `launcher`), which
    sits in a closed shadow root: only the browser's own DevTools protocol reaches it."""
    cdp = await page.context.new_cdp_session(page)
    try:
        await cdp.send("DOM.enable")
        await cdp.send("CSS.enable")
        document = await cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})
        panel = _node(document["root"], lambda n: part in n.get("attributes", [])[1::2])
        style = await cdp.send("CSS.getComputedStyleForNode", {"nodeId": panel["nodeId"]})
    finally:
        await cdp.detach()
    return next(str(p["value"]) for p in style["computedStyle"] if p["name"] == prop)


def _node(node: dict[str, Any], wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first node of a DevTools DOM tree (shadow roots included) that is `wanted`."""
    pending = [node]
    while pending:
        current = pending.pop(0)
        if wanted(current):
            return current
        pending += current.get("shadowRoots", []) + current.get("children", [])
    raise LookupError("no such node")
