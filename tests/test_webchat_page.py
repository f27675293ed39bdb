"""The web chat page (`/`) driven in headless Chromium: send, stream, resume, live updates.

Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.databases import require_service
from tests.support.harness import make_settings, running_gateway

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN_KEY = "parley.webchat.token"
TIMEOUT_MS = 10_000

pytestmark = [
    pytest.mark.browser,
    # The page does not care about the backend; SQLite keeps the browser tests self-contained.
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]

# What each `.msg` bubble in the log is: seq, class list and text, in document order.
BUBBLES_JS = """els => els.map(e => [e.dataset.seq ?? null, e.className, e.textContent])"""

# Keeps every draft bubble the page ever creates, so a test can look at it after removal.
RECORD_DRAFTS_JS = """
window.__drafts = [];
new MutationObserver((records) => {
  for (const r of records) for (const n of r.addedNodes)
    if (n.classList && n.classList.contains("draft")) window.__drafts.push(n);
}).observe(document, { childList: true, subtree: true });
"""


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        require_service(
            "Chromium",
            FileNotFoundError(f"{CHROMIUM} is missing; install it with `apt-get install chromium`"),
        )
    return CHROMIUM


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh profile (empty localStorage); fails the test on any uncaught page error."""
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        await context.close()
    assert errors == [], f"uncaught errors in the page: {errors}"


async def open_chat(page: Page, url: str) -> None:
    await page.goto(url + "/")
    await expect(page.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)


async def bubbles(page: Page) -> list[list[Any]]:
    found: list[list[Any]] = await page.locator("#log .msg").evaluate_all(BUBBLES_JS)
    return found


async def stored_token(page: Page) -> str:
    token = await page.evaluate("key => localStorage.getItem(key)", TOKEN_KEY)
    assert isinstance(token, str)
    assert token
    return token


async def test_enter_sends_and_the_streamed_reply_becomes_one_assistant_bubble(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("reply 1", pieces=3, gate=gate))
    await page.add_init_script(RECORD_DRAFTS_JS)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        message = page.get_by_label("Message")
        await message.fill("hello there")
        await message.press("Enter")

        await expect(page.locator("#log .msg.user")).to_have_text(["hello there"])
        await expect(message).to_have_value("")
        await llm.wait_for_requests(1)
        # The model has been asked but is held: nothing may stand in for its answer yet.
        await expect(page.locator("#log .msg.assistant")).to_have_count(0)

        gate.set()
        log = page.locator("#log .msg")
        await expect(log).to_have_text(["hello there", "reply 1"])
        await expect(log).to_have_class(["msg user", "msg assistant"])
        await expect(page.locator("#log .draft")).to_have_count(0)

        # The reply did stream into a draft, which the stored message then replaced.
        drafts = await page.evaluate(
            "() => window.__drafts.map(d => [d.textContent, d.isConnected])"
        )
        assert drafts == [["reply 1", False]]
        assert await bubbles(page) == [
            ["1", "msg user", "hello there"],
            ["2", "msg assistant", "reply 1"],
        ]
        assert [(m["seq"], m["text"]) for m in await gw.history(await stored_token(page))] == [
            (1, "hello there"),
            (2, "reply 1"),
        ]


async def test_reload_shows_the_history_once_and_in_order(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        message = page.get_by_label("Message")
        log = page.locator("#log .msg")
        await message.fill("first")
        await message.press("Enter")
        await expect(log).to_have_text(["first", "reply 1"])
        await message.fill("second")
        await message.press("Enter")
        await expect(log).to_have_text(["first", "reply 1", "second", "reply 2"])
        token = await stored_token(page)

        await page.reload()
        await expect(page.locator("#status")).to_have_text("online")
        await expect(log).to_have_text(["first", "reply 1", "second", "reply 2"])
        expected = [
            ["1", "msg user", "first"],
            ["2", "msg assistant", "reply 1"],
            ["3", "msg user", "second"],
            ["4", "msg assistant", "reply 2"],
        ]
        assert await bubbles(page) == expected
        assert await stored_token(page) == token  # the same visitor, not a new session

        # Live messages after the resume follow on, without repeating what was replayed.
        await message.fill("third")
        await message.press("Enter")
        await expect(log).to_have_text(
            ["first", "reply 1", "second", "reply 2", "third", "reply 3"]
        )
        assert await bubbles(page) == [
            *expected,
            ["5", "msg user", "third"],
            ["6", "msg assistant", "reply 3"],
        ]
        assert len(llm.requests) == 3


async def test_messages_from_another_client_show_up_live(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        token = await stored_token(page)

        response = await gw.send(token, "sent from my phone")

        assert response.status_code == 200, response.text
        assert response.json()["reply"]["text"] == "reply 1"
        log = page.locator("#log .msg")
        await expect(log).to_have_text(["sent from my phone", "reply 1"])
        assert await bubbles(page) == [
            ["1", "msg user", "sent from my phone"],
            ["2", "msg assistant", "reply 1"],
        ]

        # And the page keeps talking in the same conversation afterwards.
        message = page.get_by_label("Message")
        await message.fill("and now from the browser")
        await message.press("Enter")
        await expect(log).to_have_text(
            ["sent from my phone", "reply 1", "and now from the browser", "reply 2"]
        )
        assert [m["text"] for m in await gw.history(token)] == [
            "sent from my phone",
            "reply 1",
            "and now from the browser",
            "reply 2",
        ]


async def test_html_in_messages_is_shown_as_text(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    hostile = (
        '<b>bold</b><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    )
    answer = '<i>italic</i><img src=y onerror="window.__pwned = 3">'
    llm.script(Reply(answer))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        message = page.get_by_label("Message")
        await message.fill(hostile)
        await message.press("Enter")

        log = page.locator("#log .msg")
        await expect(log).to_have_text([hostile, answer])
        assert await bubbles(page) == [["1", "msg user", hostile], ["2", "msg assistant", answer]]
        assert await page.locator("#log .msg *").count() == 0  # no element came from the text
        assert await page.evaluate("() => window.__pwned") is None

        # Replayed history is rendered the same way.
        await page.reload()
        await expect(log).to_have_text([hostile, answer])
        assert await page.locator("#log .msg *").count() == 0
        assert await page.evaluate("() => window.__pwned") is None
