"""A reply shown as it is written in one message, edited as it grows (DESIGN §10), in a
Telegram group and a Discord channel, against the fake Bot API and the fake Discord:
previews paced, never of a preamble before a tool call, code blocks closed, entity
offsets right after astral characters; the reply ends up once, in that message; a 429
stops the previews and the reply waits it out; a gateway killed mid-stream finishes
the same message after its restart."""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.fakes import discord_api as dc
from tests.fakes import telegram_api as tg
from tests.fakes.discord_api import Guild, discord_settings, fake_discord
from tests.fakes.llm_server import CallTools, FakeLLM, Reply
from tests.support.harness import make_settings, running_gateway
from tests.support.platforms import platform_gateway
from tests.support.polling import eventually
from tests.support.process import (
    REPO,
    free_port,
    parley_env,
    start_parley,
    stop_process,
)

PERSON = 5150
GROUP = tg.group_chat()
GROUP_ID = GROUP["id"]
ANSWER = " ".join(f"Sentence number {n} of a long answer about tides and moons." for n in range(12))
EDITS: dict[str, Any] = {"telegram_stream_edits": True, "stream_interval_ms": 300}
FENCE_LINE = re.compile(r"^```.*$", re.MULTILINE)


def _mention(words: str) -> dict[str, Any]:
    return tg.mention_update(PERSON, f"@{tg.BOT_USERNAME} {words}", GROUP)


async def test_a_telegram_group_sees_one_message_grow_into_the_reply(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    midway = asyncio.Event()
    second = "And a second answer, in a message of its own."
    llm.script(Reply(ANSWER, pieces=6, midway=midway), Reply(second))
    async with platform_gateway(database_url, tmp_path, llm, **EDITS) as p:
        await p.telegram(_mention("tell me about tides"))
        await p.tg.wait_until(lambda f: len(f.sent(GROUP_ID)) == 1)  # the preview
        preview = p.tg.sent(GROUP_ID)[0].params
        midway.set()
        await p.tg.wait_until(lambda f: f.shown(GROUP_ID) == [ANSWER])
        await p.gw.services.runner.idle()
        # The next turn opens a message of its own: the first is finished with.
        await p.telegram(_mention("and another thing"))
        await p.tg.wait_until(lambda f: f.shown(GROUP_ID) == [ANSWER, second])
        # The platform showing the reply comes before the delivery loop records it.
        stored = await eventually(
            p.all_messages,
            until=lambda ms: all(
                m["delivery"] != "pending" for m in ms if m["role"] == "assistant"
            ),
        )
        metrics = (await p.gw.http.get("/metrics")).text

    assert ANSWER.startswith(preview["text"])
    assert preview["text"] != ANSWER
    assert preview["reply_parameters"]["message_id"]  # it answers the mention, as a reply does
    assert p.tg.calls_of("sendMessageDraft") == []  # groups have no drafts
    assert len(p.tg.sent(GROUP_ID)) == 2  # one message a reply
    replies = [m for m in stored if m["role"] == "assistant"]
    assert [(m["text"], m["delivery"]) for m in replies] == [(ANSWER, "sent"), (second, "sent")]
    assert 'parley_stream_previews_total{channel="telegram",outcome="sent"}' in metrics


async def test_entity_offsets_count_astral_characters_in_previews_and_the_reply(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    answer = ("🌊🌊 The **tide** rises twice a day, 🌕 the `moon` pulls it. " * 8).strip()
    plain = answer.replace("**", "").replace("`", "")
    llm.script(Reply(answer, pieces=8, pace=0.1))
    async with platform_gateway(database_url, tmp_path, llm, **EDITS) as p:
        await p.telegram(_mention("tides?"))
        await p.tg.wait_until(lambda f: f.shown(GROUP_ID) == [plain], seconds=30)
        await p.gw.services.runner.idle()

    calls = p.tg.sent(GROUP_ID) + p.tg.edits(GROUP_ID)
    assert len(calls) >= 2  # a preview, then the reply edited in
    # The fake refuses entities outside their text, as Telegram does: none was refused.
    assert all(c.params.get("_accepted") for c in p.tg.calls_of("editMessageText"))
    final = p.tg.edits(GROUP_ID)[-1].params
    bold = [e for e in final["entities"] if e["type"] == "bold"]
    code = [e for e in final["entities"] if e["type"] == "code"]
    # "🌊🌊 The " is 9 UTF-16 units; " rises twice a day, 🌕 the " 27 more after "tide".
    assert (bold[0]["offset"], bold[0]["length"]) == (9, 4)
    assert (code[0]["offset"], code[0]["length"]) == (9 + 4 + 27, 4)
    assert final["text"] == plain
    assert len(p.tg.sent(GROUP_ID)) == 1


async def test_a_preamble_before_a_tool_call_is_never_shown_in_a_group(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    preamble = "Let me look that up in what you told me before."
    answer = "Nothing about tides came up before; here is what I know. " * 4
    llm.script(
        CallTools([("archive_search", {"query": "tides"})], text=preamble),
        Reply(answer.strip(), pieces=6),
    )
    async with platform_gateway(database_url, tmp_path, llm, **EDITS) as p:
        await p.telegram(_mention("what did I say about tides?"))
        await p.tg.wait_until(lambda f: f.shown(GROUP_ID) == [answer.strip()])
        await p.gw.services.runner.idle()

    shown = [c.params["text"] for c in p.tg.sent(GROUP_ID) + p.tg.edits(GROUP_ID)]
    assert shown
    assert not any(preamble in t for t in shown)


async def test_a_429_on_a_preview_stops_previews_and_the_reply_waits_it_out_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # Previews 3 s apart in a group: the first is a message, the second an edit that
    # Telegram refuses with a 3 s wait while the model is still writing.
    llm.script(Reply(ANSWER, pieces=10, pace=0.5))
    async with platform_gateway(database_url, tmp_path, llm, **EDITS) as p:
        p.tg.fail("editMessageText", tg.flood(retry_after=3))
        await p.telegram(_mention("tides, at length"))
        await p.tg.wait_until(lambda f: f.shown(GROUP_ID) == [ANSWER], seconds=30)
        await p.gw.services.runner.idle()
        metrics = (await p.gw.http.get("/metrics")).text

    refused, *after = p.tg.calls_of("editMessageText")
    assert not refused.params.get("_accepted")
    assert [c.params["text"] for c in after] == [ANSWER]  # no preview after the 429
    waited = (after[0].at - refused.at).total_seconds()
    assert waited >= 3 * 0.95, waited
    assert len(p.tg.sent(GROUP_ID)) == 1
    assert 'parley_stream_previews_total{channel="telegram",outcome="dropped"} 1.0' in metrics


async def test_a_discord_preview_keeps_its_pace_and_its_code_blocks_closed(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    code = "\n".join(f"    tide_{n} = moon.pull({n})" for n in range(12))
    answer = f"Here is how it goes:\n```python\ndef tides(moon):\n{code}\n```\nThat is all."
    guild = Guild(id=7001, name="Family", channels=(7101,))
    channel = guild.channels[0]
    llm.script(Reply(answer, pieces=10, pace=0.4))
    async with fake_discord([guild]) as fake:
        values = discord_settings(
            fake, discord_policy="open", discord_stream_edits=True, stream_interval_ms=300
        )
        async with running_gateway(make_settings(database_url, tmp_path, llm, **values)) as gw:
            await fake.connected()
            ann = dc.user(4001, "ann")
            mention = dc.message(
                ann, channel, f"<@{dc.BOT_ID}> code?", guild=guild, mentions=[dc.BOT_USER]
            )
            await fake.dispatch("MESSAGE_CREATE", mention)
            await fake.wait_until(lambda f: f.shown(channel) == [answer], seconds=30)
            await gw.services.runner.idle()

    (preview,) = fake.sent
    assert preview.reference is not None
    assert preview.reference["message_id"] == mention["id"]
    contents = [preview.content, *(e.content for e in fake.edits)]
    assert contents[-1] == answer
    assert contents.count(answer) == 1
    previews = contents[:-1]
    assert len(previews) >= 2
    for content in previews:
        assert answer.startswith(content.removesuffix("\n```"))
        assert len(FENCE_LINE.findall(content)) % 2 == 0, content  # every block closed
    times = [e.at for e in fake.edits[:-1]]
    assert all(b - a >= 1.25 * 0.95 for a, b in itertools.pairwise(times)), times


async def test_a_gateway_killed_mid_stream_finishes_the_same_message_after_a_restart(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    never = asyncio.Event()
    after_restart = "The answer, written again after the restart. " * 6
    # Written slowly enough to be previewed again: in the message the first run left.
    llm.script(
        Reply(ANSWER, pieces=6, midway=never), Reply(after_restart.strip(), pieces=6, pace=0.4)
    )
    async with tg.fake_telegram() as fake:
        port = free_port()
        env = parley_env(
            database_url=database_url,
            data_dir=str(tmp_path / "data"),
            port=str(port),
            **llm.settings(),
            telegram_token=fake.token,
            telegram_webhook_secret=tg.WEBHOOK_SECRET,
            telegram_api_url=fake.base_url,
            telegram_policy="open",
            telegram_stream_edits="true",
            turn_lease_seconds="3",
            sweep_interval_seconds="0.5",
        )
        first = await start_parley("serve", env=env, cwd=REPO)
        try:
            await _post_update(port, _mention("tell me about tides"))
            await fake.wait_until(lambda f: len(f.sent(GROUP_ID)) == 1, seconds=30)
            await eventually(lambda: _previews_kept(database_url), until=lambda n: n == 1)
            await stop_process(first, signal.SIGKILL)
            second = await start_parley("serve", env=env, cwd=REPO)
            try:
                await fake.wait_until(
                    lambda f: f.shown(GROUP_ID) == [after_restart.strip()], seconds=60
                )
            finally:
                await stop_process(second, signal.SIGTERM, seconds=30)
        finally:
            await stop_process(first, signal.SIGKILL)

    assert len(fake.sent(GROUP_ID)) == 1  # the preview, and no second copy
    previews = [c.params["text"] for c in fake.edits(GROUP_ID)][:-1]
    assert any(after_restart.startswith(t) for t in previews)  # previewed there again
    assert ANSWER.startswith(fake.sent(GROUP_ID)[0].params["text"])
    assert await _previews_kept(database_url) == 0  # finished with


async def _post_update(port: int, update: dict[str, Any]) -> None:
    headers = {"X-Telegram-Bot-Api-Secret-Token": tg.WEBHOOK_SECRET}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

        async def post() -> int:
            try:
                return (
                    await client.post("/webhooks/telegram", json=update, headers=headers)
                ).status_code
            except httpx.TransportError:
                return 0

        await eventually(post, until=lambda status: status == 200, seconds=30)


async def _previews_kept(database_url: str) -> int:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as connection:
            return int(
                (
                    await connection.execute(text("SELECT count(*) FROM stream_previews"))
                ).scalar_one()
            )
    finally:
        await engine.dispose()
