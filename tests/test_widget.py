"""The widget on another site, in headless Chromium: one tag adds a launcher and the
chat in a frame from Parley's origin; a host the gateway does not list cannot frame it;
the host's CSS cannot reach the panel.

Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import jwt
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from playwright.async_api import Browser, Frame, Page, expect

from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.harness import make_settings, running_gateway
from tests.support.polling import eventually
from tests.support.servers import serve
from tests.support.webpage import TIMEOUT_MS, csp_violations

# The fixtures `chromium`, `browser` and `page`.
pytest_plugins = ["tests.support.browser"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]

# A host page as careless (or hostile) as they come, around the one tag.
HOST_PAGE = """<!doctype html>
<html><head><title>Shop</title>
<style>* {{ all: unset !important; font-size: 40px !important; }} iframe {{ width: 10px !important; }}</style>
</head><body><p>Our shop</p>
<script>window.Parley = window.Parley || {{ q: [] }};
["open", "close", "identify", "on"].forEach(n => window.Parley[n] = window.Parley[n] ||
  ((...a) => window.Parley.q.push([n, ...a])));
window.Parley.on("message", m => (window.seen = (window.seen || []).concat([m])));</script>
<script src="{gateway}/webchat/widget.js" data-title="Shop chat" async></script>
</body></html>"""


@contextlib.asynccontextmanager
async def host_site(gateway: dict[str, str]) -> AsyncIterator[str]:
    """A site on an origin of its own; its page embeds the gateway named later."""
    app = FastAPI()

    @app.get("/", response_class=HTMLResponse)
    async def home() -> str:
        return HOST_PAGE.format(gateway=gateway["url"])

    async with serve(app) as url:
        yield url


async def _frame(page: Page) -> Frame:
    """The widget's frame (in a closed shadow root: found among the page's frames)."""

    async def find() -> Frame | None:
        return next((f for f in page.frames if "/webchat/frame" in f.url), None)

    found = await eventually(find, until=lambda f: f is not None)
    assert found is not None
    return found


async def _open_by_keyboard(page: Page) -> Frame:
    frame = await _frame(page)
    await expect(frame.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)
    await page.keyboard.press("Tab")  # the launcher is the page's first stop
    await page.keyboard.press("Enter")
    return frame


async def test_the_widget_on_an_allowed_site_chats_and_keeps_its_history(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
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
            font = await frame.locator(".msg.assistant").evaluate(
                "e => getComputedStyle(e).fontSize"
            )

            async def seen_by_host() -> list[str]:
                roles: list[str] = await page.evaluate("(window.seen || []).map(m => m.role)")
                return roles

            # Told by messages of their own, which may land after the reply is shown.
            seen = await eventually(seen_by_host, until=lambda roles: len(roles) >= 2)
            # Artifacts to look at: the open panel, wide and at 360 px.
            await page.screenshot(path=tmp_path / "widget-desktop.png")
            await page.set_viewport_size({"width": 360, "height": 740})
            await page.screenshot(path=tmp_path / "widget-360.png")
            narrow = await element.bounding_box()
            await frame.get_by_label("Message").press("Escape")
            # The frame asks the page to close it by a message: wait for the page to act.
            hidden = await eventually(element.is_hidden, until=bool)

            await page.reload()
            again = await _open_by_keyboard(page)
            history = await again.locator(".msg").all_text_contents()
            title = await again.locator("header").text_content()
            await again.get_by_role("button", name="Close chat").click()
            closed = await eventually((await again.frame_element()).is_hidden, until=bool)

    assert size is not None
    assert 300 <= size["width"] <= 400  # the host's `iframe { width: 10px }` did not apply
    assert font != "40px"
    assert narrow is not None
    assert narrow["width"] == 360  # the panel takes the whole of a phone's width
    assert seen[:2] == ["user", "assistant"]
    assert hidden
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
    gateway: dict[str, str] = {}
    secret = "site-identity-secret-0123456789abcdef"

    def token(sub: str) -> str:
        expires = int(time.time()) + 600
        return jwt.encode({"sub": sub, "name": "Ada", "exp": expires}, secret, algorithm="HS256")

    async with host_site(gateway) as shop:
        settings = make_settings(
            database_url,
            tmp_path,
            llm,
            webchat_allowed_origins=shop,
            webchat_identity_secret=secret,
        )
        async with running_gateway(settings) as gw:
            gateway["url"] = gw.url
            phone = await _identified(page, shop, token("ada"))
            box = phone.get_by_label("Message")
            await box.fill("my parcel number is 77")
            await box.press("Enter")
            await expect(phone.locator(".msg.assistant:not(.draft)")).to_have_text("Noted, Ada.")
            laptop_context = await browser.new_context()
            stranger_context = await browser.new_context()
            try:
                laptop = await _identified(await laptop_context.new_page(), shop, token("ada"))
                await expect(laptop.locator(".msg")).to_have_count(2)
                on_laptop = await laptop.locator(".msg").all_text_contents()
                stranger = await _identified(await stranger_context.new_page(), shop, token("bob"))
                await expect(stranger.locator("#status")).to_have_text("online")
                for_stranger = await stranger.locator(".msg").count()
            finally:
                await laptop_context.close()
                await stranger_context.close()

    assert on_laptop == ["my parcel number is 77", "Noted, Ada."]
    assert for_stranger == 0


async def _identified(page: Page, shop: str, identity_token: str) -> Frame:
    """A visitor of the shop whom the shop signs in; their frame, once it is theirs."""
    await page.goto(shop + "/")
    frame = await _frame(page)
    await expect(frame.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)
    before = await frame.evaluate("localStorage.getItem('parley.webchat.token')")
    await page.evaluate("t => { window.Parley.identify(t); window.Parley.open(); }", identity_token)

    async def token_now() -> object:
        return await frame.evaluate("localStorage.getItem('parley.webchat.token')")

    await eventually(
        token_now, until=lambda t: isinstance(t, str) and t.startswith("wc2.") and t != before
    )
    await expect(frame.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)
    return frame
