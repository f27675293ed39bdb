"""A reply shown while it is written (DESIGN §10), in a Telegram private chat, against the
fake Bot API: drafts of the answer so far, paced, never of a preamble before a tool call,
never in a group; the reply itself arrives once; a chat that refuses drafts gets the
typing indicator instead."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

from gateway.channels.previews import drafting
from gateway.envelopes import ChatRef
from gateway.metrics import Metrics
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import CallTools, FakeLLM, Reply
from tests.support.platforms import Platforms, platform_gateway

CHAT = 5150
INTERVAL_MS = 300
# Long enough to be clearly an answer before its end (the hold-back of a turn that
# may call tools), in six pieces.
ANSWER = " ".join(f"Sentence number {n} of a long answer about tides and moons." for n in range(12))


async def _stream_half(p: Platforms, llm: FakeLLM, text: str = ANSWER) -> asyncio.Event:
    """The person writes; the model streams half its answer and waits."""
    midway = asyncio.Event()
    llm.script(Reply(text, pieces=6, midway=midway))
    said = await p.telegram(tg.text_update(CHAT, "tell me about tides"))
    assert said.status_code == 200
    return midway


async def test_a_private_chat_sees_drafts_of_the_answer_then_the_reply_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm, stream_interval_ms=INTERVAL_MS) as p:
        midway = await _stream_half(p, llm)
        await p.tg.wait_until(lambda f: len(f.drafts(CHAT)) >= 1)
        midway.set()
        await p.tg.wait_until(lambda f: f.texts(CHAT) == [ANSWER])
        await p.gw.services.runner.idle()
        metrics = (await p.gw.http.get("/metrics")).text

    drafts = p.tg.drafts(CHAT)
    texts = [d.params["text"] for d in drafts]
    assert all(ANSWER.startswith(text) for text in texts)
    assert texts[0] == ANSWER[: len(texts[0])]
    assert len(texts[0]) >= len(ANSWER) // 3
    assert len({d.params["draft_id"] for d in drafts}) == 1  # one draft, animated
    gaps = [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(drafts)]
    assert all(gap >= INTERVAL_MS / 1000 * 0.95 for gap in gaps), gaps
    assert p.tg.texts(CHAT) == [ANSWER]  # the reply itself, once
    assert 'parley_stream_previews_total{channel="telegram",outcome="sent"}' in metrics


async def test_a_preamble_before_a_tool_call_is_never_shown(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    preamble = "Let me look that up in what you told me before."
    llm.script(
        CallTools([("archive_search", {"query": "tides"})], text=preamble),
        Reply("Nothing about tides came up before; here is what I know. " * 4),
    )
    async with platform_gateway(database_url, tmp_path, llm, stream_interval_ms=INTERVAL_MS) as p:
        await p.telegram(tg.text_update(CHAT, "what did I say about tides?"))
        await p.tg.wait_until(lambda f: len(f.texts(CHAT)) == 1)
        await p.gw.services.runner.idle()

    assert not any(preamble in d.params["text"] for d in p.tg.drafts(CHAT))
    assert preamble not in p.tg.texts(CHAT)[0]


async def test_a_group_gets_no_drafts(database_url: str, tmp_path: Path, llm: FakeLLM) -> None:
    llm.script(Reply(ANSWER, pieces=6))
    async with platform_gateway(database_url, tmp_path, llm, stream_interval_ms=INTERVAL_MS) as p:
        group = tg.group_chat()
        await p.telegram(tg.mention_update(CHAT, f"@{tg.BOT_USERNAME} tides, please", group))
        await p.tg.wait_until(lambda f: len(f.texts(group["id"])) == 1)
        await p.gw.services.runner.idle()

    assert p.tg.calls_of("sendMessageDraft") == []


async def test_a_chat_that_refuses_drafts_gets_typing_and_the_reply_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm, stream_interval_ms=INTERVAL_MS) as p:
        p.tg.fail("sendMessageDraft", tg.TgFail(400, "Bad Request: TEXTDRAFT_PEER_INVALID"))
        midway = await _stream_half(p, llm)
        await p.tg.wait_until(lambda f: len(f.calls_of("sendMessageDraft")) == 1)
        midway.set()
        await p.tg.wait_until(lambda f: f.texts(CHAT) == [ANSWER])
        await p.gw.services.runner.idle()
        metrics = (await p.gw.http.get("/metrics")).text

    assert len(p.tg.calls_of("sendMessageDraft")) == 1  # refused once, never tried again
    assert p.tg.calls_of("sendChatAction")  # typing showed meanwhile
    assert 'parley_stream_previews_total{channel="telegram",outcome="dropped"} 1.0' in metrics


class _Recorder:
    """A connector's drafting side that keeps what it was asked to show, and when."""

    channel = "telegram"

    def __init__(self) -> None:
        self.shown: list[tuple[float, int, str]] = []
        self.answered = asyncio.Event()  # the draft after the restart went out

    def cut(self, text: str) -> str:
        return text[:50]

    async def draft(self, chat: ChatRef, draft_id: int, text: str) -> None:
        self.shown.append((time.monotonic(), draft_id, text))
        if text == "the answer":
            self.answered.set()


async def test_drafts_keep_their_pace_and_a_restart_starts_a_new_draft() -> None:
    sender, metrics = _Recorder(), Metrics()
    chat = ChatRef("telegram", str(CHAT))
    async with drafting(sender, chat, 0.2, metrics) as preview:
        # A model streaming a piece every 20 ms for a second: drafts at most every 0.2 s.
        for n in range(50):
            preview.add(f"{n} ")
            await asyncio.sleep(0.02)
        preview.restart()  # the model turned to a tool: what was shown goes
        preview.add("the answer")
        await asyncio.wait_for(sender.answered.wait(), timeout=5)

    times = [at for at, _, _ in sender.shown]
    assert all(b - a >= 0.2 * 0.95 for a, b in itertools.pairwise(times))
    assert 3 <= len(sender.shown) <= 7
    first_id = sender.shown[0][1]
    assert all(text.startswith("0 ") for _, i, text in sender.shown if i == first_id)
    assert sender.shown[-1][1] != first_id  # a new draft replaces the old one
    assert sender.shown[-1][2] == "the answer"
    sent = metrics.stream_previews.labels("telegram", "sent")._value.get()
    throttled = metrics.stream_previews.labels("telegram", "throttled")._value.get()
    assert sent == len(sender.shown)
    assert throttled > 20  # most pieces waited for the next draft
