"""A person's `/export` link survives the crawlers that open links: Telegram and Discord
are told to show no preview, and opening the link (GET or HEAD) shows a page with a
Download button; only its POST spends the one-time token and sends the file."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM
from tests.support.clock import ManualClock
from tests.support.platforms import Platforms, platform_gateway

PUBLIC = "https://parley.example"
CHAT = 5151
# Lower case and unlike any other word, as a full-text index keeps its terms.
MARKER = "qzexportmarkerotter"
NO_PREVIEW = {"is_disabled": True}


async def _say(p: Platforms, text: str) -> str:
    """Send `text` from the person; the answer to it."""
    answered = len(p.tg.texts(CHAT)) + 1
    await p.telegram(tg.text_update(CHAT, text))
    await p.tg.wait_until(lambda fake: len(fake.texts(CHAT)) >= answered)
    return p.tg.texts(CHAT)[-1]


def _link_path(answer: str) -> str:
    link = next(word for word in answer.split() if word.startswith(PUBLIC))
    return link.removeprefix(PUBLIC)


def _sources(policy: str) -> set[str]:
    """Every source a Content-Security-Policy allows, whatever the directive."""
    return {source for directive in policy.split(";") for source in directive.split()[1:]}


def _assert_a_plain_safe_page(page: httpx.Response) -> None:
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["x-frame-options"] == "DENY"
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    assert "default-src 'none'" in policy
    assert {s for s in _sources(policy) if not s.startswith("'sha256-")} <= {"'self'", "'none'"}
    # Nothing is loaded from anywhere and nothing runs: it works without JavaScript.
    assert not re.search(r"<script|\ssrc=|\shref=", page.text, re.IGNORECASE)


async def test_opening_the_link_spends_nothing_and_one_post_downloads_it_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm, public_url=PUBLIC) as p:
        await _say(p, f"remember {MARKER}")
        path = _link_path(await _say(p, "/export"))
        # What a link preview, a virus scanner or a mail gateway does with a link.
        first = await p.gw.http.get(path)
        head = await p.gw.http.head(path)
        again = await p.gw.http.get(path, headers={"User-Agent": "TelegramBot (like TwitterBot)"})
        download = await p.gw.http.post(path)
        second = await p.gw.http.post(path)
        spent = await p.gw.http.get(path)
        spent_head = await p.gw.http.head(path)

    for page in (first, again):
        assert page.status_code == 200
        _assert_a_plain_safe_page(page)
        assert re.search(r'<form method="post">', page.text)
        assert re.search(r'<button type="submit">Download</button>', page.text)
        assert MARKER not in page.text
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == first.headers["content-type"]
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("application/x-ndjson")
    assert download.headers["content-disposition"].startswith("attachment;")
    assert download.headers["cache-control"] == "no-store"
    assert MARKER in download.text
    assert second.status_code == 404
    assert MARKER not in second.text
    assert spent.status_code == 404
    _assert_a_plain_safe_page(spent)
    assert "works once" in spent.text
    assert "<form" not in spent.text
    assert spent_head.status_code == 404


async def test_an_expired_link_shows_the_page_that_says_so_and_downloads_nothing(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    clock = ManualClock(datetime.now(UTC))
    async with platform_gateway(database_url, tmp_path, llm, public_url=PUBLIC, clock=clock) as p:
        path = _link_path(await _say(p, "/export"))
        clock.advance(timedelta(hours=24, seconds=1))
        page = await p.gw.http.get(path)
        download = await p.gw.http.post(path)
        clock.advance(-timedelta(hours=1))  # and the failed attempt above spent nothing
        late = await p.gw.http.post(path)

    assert page.status_code == 404
    assert "24 hours" in page.text
    assert download.status_code == 404
    assert late.status_code == 200


async def test_telegram_is_told_to_show_no_link_preview_for_any_message(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm, public_url=PUBLIC) as p:
        await _say(p, "hello, see https://example.org/page")
        await _say(p, "/export")
        code = (await _say(p, "/erase")).split("/erase ")[1].split()[0]
        done = await _say(p, f"/erase {code}")

    sent = p.tg.sent(CHAT)
    assert PUBLIC in sent[1].params["text"]
    assert done.startswith("Done")  # a notice, sent outside any turn
    # A reply, command answers (one with the link) and a notice alike.
    assert [c.params.get("link_preview_options") for c in sent] == [NO_PREVIEW] * 4
