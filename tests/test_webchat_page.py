"""The web chat page (`/`) driven in headless Chromium: send, stream, resume, live updates.

Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, Route, expect

from connectors.webchat.tokens import VisitorTokens
from tests.fakes.llm_server import Behaviour, CallTools, FakeLLM, Reply
from tests.support.harness import make_settings, running_gateway
from tests.support.polling import eventually
from tests.support.webpage import (
    TIMEOUT_MS,
    TOKEN_KEY,
    Line,
    open_chat,
    screenshot,
    send_from_page,
    stored_token,
)

# The fixtures `chromium`, `browser` and `page`.
pytest_plugins = ["tests.support.browser"]


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


async def shows(page: Page, texts: list[str]) -> None:
    """Wait until the log holds exactly these bubbles, with no reply still streaming.

    A finished draft has the same text as the stored reply that replaces it, so wait
    on the stored bubbles and then make sure no draft is left over.
    """
    await expect(page.locator("#log .msg:not(.draft)")).to_have_text(texts)
    await expect(page.locator("#log .draft")).to_have_count(0)


async def bubbles(page: Page) -> list[list[Any]]:
    found: list[list[Any]] = await page.locator("#log .msg").evaluate_all(BUBBLES_JS)
    return found


async def test_enter_sends_and_the_streamed_reply_becomes_one_assistant_bubble(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("reply 1", pieces=3, gate=gate))
    await page.add_init_script(RECORD_DRAFTS_JS)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "hello there")

        await expect(page.locator("#log .msg.user")).to_have_text(["hello there"])
        await expect(page.get_by_label("Message")).to_have_value("")
        await llm.wait_for_requests(1)
        # The model has been asked but is held: nothing may stand in for its answer yet.
        await expect(page.locator("#log .msg.assistant")).to_have_count(0)

        gate.set()
        log = page.locator("#log .msg")
        await shows(page, ["hello there", "reply 1"])
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


async def test_shift_enter_starts_a_new_line_and_enter_sends_both(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        box = page.get_by_label("Message")
        await box.press_sequentially("first line")
        await box.press("Shift+Enter")
        await box.press_sequentially("second line")
        typed = await box.input_value()
        sent_early = await page.locator("#log .msg.user").count()
        await box.press("Enter")
        await shows(page, ["first line\nsecond line", "reply 1"])
        stored = [m["text"] for m in await gw.history(await stored_token(page))]

    assert typed == "first line\nsecond line"
    assert sent_early == 0
    assert stored == ["first line\nsecond line", "reply 1"]


async def test_reload_shows_the_history_once_and_in_order(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "first")
        await shows(page, ["first", "reply 1"])
        await send_from_page(page, "second")
        await shows(page, ["first", "reply 1", "second", "reply 2"])
        token = await stored_token(page)

        await page.reload()
        await expect(page.locator("#status")).to_have_text("online")
        await shows(page, ["first", "reply 1", "second", "reply 2"])
        expected = [
            ["1", "msg user", "first"],
            ["2", "msg assistant", "reply 1"],
            ["3", "msg user", "second"],
            ["4", "msg assistant", "reply 2"],
        ]
        assert await bubbles(page) == expected
        assert await stored_token(page) == token  # the same visitor, not a new session

        # Live messages after the resume follow on, without repeating what was replayed.
        await send_from_page(page, "third")
        await shows(page, ["first", "reply 1", "second", "reply 2", "third", "reply 3"])
        assert await bubbles(page) == [
            *expected,
            ["5", "msg user", "third"],
            ["6", "msg assistant", "reply 3"],
        ]
        assert len(llm.requests) == 3


async def test_a_long_history_opens_at_the_newest_and_reads_back_on_request(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    # Positions are compared, so nothing may still be gliding: without reduced motion the
    # log scrolls smoothly to each new message, and a measurement mid-way means nothing.
    await page.emulate_media(reduced_motion="reduce")
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        token = await stored_token(page)
        for n in range(60):
            await gw.send(token, f"message {n}")  # 120 messages, seen live by the page
        await expect(page.locator("#log .msg")).to_have_count(120)

        await page.reload()
        await expect(page.locator("#status")).to_have_text("online")
        newest = [str(seq) for seq in range(71, 121)]
        await expect(page.locator("#log .msg")).to_have_count(50)
        assert [b[0] for b in await bubbles(page)] == newest
        earlier = page.get_by_role("button", name="Earlier messages")

        async def top_of(seq: int) -> float:
            where: float = await page.locator(f'#log [data-seq="{seq}"]').evaluate(
                "el => el.getBoundingClientRect().top"
            )
            return where

        async def read_back(count: int) -> tuple[float, float]:
            """Scroll to the top, press the button: where the first message was and is."""
            first = int((await bubbles(page))[0][0])
            await page.locator("#log").evaluate(
                "log => log.scrollTo({ top: 0, behavior: 'instant' })"
            )
            await expect(earlier).to_be_in_viewport()
            before = await top_of(first)
            await earlier.click()
            await expect(page.locator("#log .msg")).to_have_count(count)
            return before, await top_of(first)

        pages = [await read_back(100), await read_back(120)]
        assert [b[0] for b in await bubbles(page)] == [str(seq) for seq in range(1, 121)]
        await expect(earlier).to_be_hidden()  # nothing is older than seq 1
        await send_from_page(page, "still live")
        await expect(page.locator("#log .msg").last).to_have_text("reply 61")
    # What the visitor was looking at stayed put while older messages went in above it.
    for before, after in pages:
        assert abs(before - after) <= 1, pages


async def test_erasing_oneself_clears_the_page_and_writing_again_starts_afresh(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "something to forget")
        await expect(page.locator("#log .msg.assistant")).to_have_text(["reply 1"])
        await send_from_page(page, "/erase")
        asked = page.locator("#log .msg", has_text="To go ahead, send /erase")
        await expect(asked).to_have_count(1)
        code = (await asked.text_content() or "").split("/erase ")[1].split()[0]
        await send_from_page(page, f"/erase {code}")
        # Everything shown goes; what is left is the gateway saying it is done.
        await expect(page.locator("#log .msg.event")).to_have_text(
            [re.compile("^Done: everything I kept of you is erased")]
        )
        await expect(page.locator("#log .msg:not(.event)")).to_have_count(0)
        await expect(page.locator("#status")).to_have_text("closed")
        token = await stored_token(page)

        await send_from_page(page, "hello again")
        await expect(page.locator("#status")).to_have_text("online")
        await expect(page.locator("#log .msg.assistant")).to_have_count(1)
        history = await gw.history(token)

    assert [m["text"] for m in history if m["role"] == "user"] == ["hello again"]
    assert history[0]["seq"] == 1


async def test_messages_from_another_client_show_up_live(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        token = await stored_token(page)

        response = await gw.send(token, "sent from my phone")

        assert response.status_code == 200, response.text
        assert response.json()["reply"]["text"] == "reply 1"
        await shows(page, ["sent from my phone", "reply 1"])
        assert await bubbles(page) == [
            ["1", "msg user", "sent from my phone"],
            ["2", "msg assistant", "reply 1"],
        ]

        # And the page keeps talking in the same conversation afterwards.
        await send_from_page(page, "and now from the browser")
        await shows(page, ["sent from my phone", "reply 1", "and now from the browser", "reply 2"])
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
    await page.add_init_script(RECORD_DRAFTS_JS)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, hostile)

        await shows(page, [hostile, answer])
        assert await bubbles(page) == [["1", "msg user", hostile], ["2", "msg assistant", answer]]
        assert await page.locator("#log .msg *").count() == 0  # no element came from the text
        # The streamed draft showed the markup as text too.
        drafts = await page.evaluate(
            "() => window.__drafts.map(d => [d.textContent, d.childElementCount])"
        )
        assert drafts == [[answer, 0]]
        assert await page.evaluate("() => window.__pwned") is None

        # Replayed history is rendered the same way.
        await page.reload()
        await shows(page, [hostile, answer])
        assert await page.locator("#log .msg *").count() == 0
        assert await page.evaluate("() => window.__pwned") is None


async def test_after_a_dropped_connection_the_page_catches_up_without_repeats(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    line = Line()
    await line.install(page)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "before the drop")
        await shows(page, ["before the drop", "reply 1"])

        await line.cut(stay_down=True)
        await expect(page.locator("#status")).to_have_text("reconnecting…")
        response = await gw.send(await stored_token(page), "while the page was away")
        assert response.status_code == 200, response.text
        # The page keeps trying (and failing) while the line is down.
        await asyncio.wait_for(line.refused.wait(), TIMEOUT_MS / 1000)

        line.up = True
        await expect(page.locator("#status")).to_have_text("online")
        await shows(page, ["before the drop", "reply 1", "while the page was away", "reply 2"])
        assert [b[0] for b in await bubbles(page)] == ["1", "2", "3", "4"]


async def test_a_token_the_server_no_longer_accepts_starts_a_fresh_conversation(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    line = Line()
    await line.install(page)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "under the old key")
        await shows(page, ["under the old key", "reply 1"])
        old_token = await stored_token(page)

        # As if the secret key had been rotated: the stored token is signed by another key.
        _, stale = VisitorTokens([b"a-key-this-gateway-never-had"]).new_visitor()
        await page.evaluate(
            "([key, token]) => localStorage.setItem(key, token)", [TOKEN_KEY, stale]
        )
        await line.cut(stay_down=False)

        await expect(page.locator("#log .event")).to_have_text(["invalid web chat token"])
        fresh = await eventually(
            lambda: page.evaluate("key => localStorage.getItem(key)", TOKEN_KEY),
            until=lambda token: token not in (None, stale),
        )
        assert isinstance(fresh, str)
        await expect(page.locator("#status")).to_have_text("online")
        assert fresh not in (stale, old_token)

        await send_from_page(page, "after the rotation")
        # The new conversation numbers its messages from 1 again; they must still be shown,
        # and the old conversation's bubbles, which the new token cannot read, are gone.
        await shows(page, ["invalid web chat token", "after the rotation", "reply 2"])
        assert await bubbles(page) == [
            [None, "msg event", "invalid web chat token"],
            ["1", "msg user", "after the rotation"],
            ["2", "msg assistant", "reply 2"],
        ]
        assert [m["text"] for m in await gw.history(fresh)] == ["after the rotation", "reply 2"]


async def test_a_failed_session_start_is_retried(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    refused: list[str] = []

    async def refuse_once(route: Route) -> None:
        if refused:
            await route.continue_()
        else:
            refused.append(route.request.method)
            await route.fulfill(status=503, body="briefly unavailable")

    await page.route(re.compile(r"/webchat/sessions$"), refuse_once)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        assert refused == ["POST"]
        await send_from_page(page, "second time lucky")
        await shows(page, ["second time lucky", "reply 1"])


HOSTILE_REPLY = (
    "Hi **there**, *mind* `this` and set PARLEY_LLM_MODEL in snake_case_land:\n"
    "- one\n- two\n```\n<b>kept as text</b>\n```\n"
    '<img src=x onerror="window.pwned = 1"> [click](javascript:window.pwned=2) '
    "[docs](https://example.org/a?b=1)"
)


async def test_replies_render_as_safe_markdown_and_nothing_else(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    llm.script(Reply(HOSTILE_REPLY))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "show me")
        reply = page.locator(".msg.assistant:not(.draft)")
        await expect(reply.locator("strong")).to_have_text("there")
        made = await reply.evaluate(
            "e => [...e.querySelectorAll('*')].map(n => n.tagName.toLowerCase())"
        )
        links = await reply.locator("a").evaluate_all("as => as.map(a => a.href)")
        pwned = await page.evaluate("window.pwned")
        code = await reply.locator("pre code").text_content()
        text = await reply.inner_text()

    assert sorted(set(made)) == ["a", "code", "em", "li", "pre", "strong", "ul"]
    assert links == ["https://example.org/a?b=1"]
    assert code == "<b>kept as text</b>"
    assert "set PARLEY_LLM_MODEL in snake_case_land:" in text
    assert pwned is None


async def test_dark_mode_and_reduced_motion_are_followed(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    gate = asyncio.Event()
    llm.script(Reply("done", gate=gate))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "hello")
        typing = page.get_by_role("status", name="The assistant is writing")
        await expect(typing).to_be_visible()
        dot = typing.locator("span").first
        moving = await dot.evaluate("e => getComputedStyle(e).animationName")
        light = await page.evaluate("getComputedStyle(document.body).backgroundColor")

        await page.emulate_media(color_scheme="dark", reduced_motion="reduce")
        still = await dot.evaluate("e => getComputedStyle(e).animationName")
        dark = await page.evaluate("getComputedStyle(document.body).backgroundColor")
        text = await page.evaluate("getComputedStyle(document.body).color")
        await screenshot(page, artifacts / "dark.png")
        gate.set()
        await shows(page, ["hello", "done"])

    assert (moving, still) == ("blink", "none")
    assert light == "rgb(255, 255, 255)"
    assert dark == "rgb(22, 24, 29)"
    assert text == "rgb(232, 232, 234)"


LONG_PREAMBLE = "I'll look through what you told me before, to be sure of it. " * 3


@pytest.mark.parametrize(
    ("preamble", "shown"),
    [
        ("Let me look.", []),  # a short start is held back, and dropped for the call
        (LONG_PREAMBLE, [LONG_PREAMBLE]),  # one that passed for an answer gives way
    ],
)
async def test_text_written_before_a_lookup_gives_way_to_the_answer(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, preamble: str, shown: list[str]
) -> None:
    def model(body: dict[str, Any], number: int) -> Behaviour | None:
        if any(m.get("role") == "tool" for m in body["messages"]):
            return Reply("Found it: the blue door.")
        return CallTools([("archive_search", {"query": "door"})], text=preamble)

    llm.responder = model
    await page.add_init_script(RECORD_DRAFTS_JS)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "which door?")
        await shows(page, ["which door?", "Found it: the blue door."])
        drafts = await page.evaluate(
            "() => window.__drafts.map(d => [d.textContent, d.isConnected])"
        )

    assert drafts == [[text, False] for text in [*shown, "Found it: the blue door."]]
