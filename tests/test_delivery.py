"""Durable delivery: split replies arrive whole and in order through 429s and 5xx, are
marked failed with the platform's reason after N tries, and survive a restart."""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, update

from gateway.channels.delivery import RetryPolicy
from gateway.channels.outbox import Outbox
from gateway.channels.pacing import Pacer
from gateway.channels.port import Pace
from gateway.channels.shared_pacing import RedisPacer
from gateway.channels.split import close_fences, split_text, utf16_length
from memory.storage.engine import create_engine, session_factory
from memory.storage.leases import Leases
from memory.storage.messages import NewMessage
from memory.storage.models import Delivery, Lease, Message, Role
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens
from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.fakes.graph_api import GraphFail
from tests.fakes.llm_server import FakeLLM, Reply
from tests.fakes.telegram_api import TgFail, flood
from tests.support.clock import ManualClock
from tests.support.platforms import platform_gateway
from tests.support.polling import eventually

CHAT = 31337
# Delivery lanes are leased only where replicas share a database server.
LANES_NEED_POSTGRES = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
PERSON = "16505550000"


def _long_reply(chars: int = 10_000, seed: int = 1) -> str:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "ιώτα", "🙂"]
    paragraphs, size = [], 0
    while size < chars:
        sentences = [
            " ".join(rng.choice(words) for _ in range(rng.randint(4, 14))).capitalize() + "."
            for _ in range(rng.randint(2, 6))
        ]
        paragraph = " ".join(sentences)
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    body = "\n\n".join(paragraphs)[: chars - 1]
    return (body[:-1] + "x" if body[-1].isspace() else body) + "."


def _words(text: str) -> list[str]:
    return text.split()


# -- splitting ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_split_parts_fit_keep_every_word_in_order_and_prefer_boundaries(seed: int) -> None:
    text = _long_reply(rng_chars := random.Random(seed).randint(100, 30_000), seed)
    limit = random.Random(seed).choice([50, 200, 4096])
    parts = split_text(text, limit, utf16_length)

    assert all(0 < utf16_length(part) <= limit for part in parts)
    assert _words(" ".join(parts)) == _words(text)
    if rng_chars > limit and limit >= 200:
        # Paragraph or sentence boundaries: every part but the last ends a sentence.
        assert all(part.endswith(".") for part in parts[:-1]), parts


def test_split_cuts_an_unbroken_run_and_never_halves_a_surrogate_pair() -> None:
    assert split_text("x" * 10, 4) == ["xxxx", "xxxx", "xx"]
    assert split_text("🙂" * 5, 4, utf16_length) == ["🙂🙂", "🙂🙂", "🙂"]
    assert split_text("short", 4096) == ["short"]
    assert split_text("   ", 10) == []


def test_split_prefers_a_paragraph_to_a_sentence_to_a_space() -> None:
    text = "One. Two three.\n\nFour five six seven."
    assert split_text(text, 30) == ["One. Two three.", "Four five six seven."]
    assert split_text("One two. Three four five", 16) == ["One two.", "Three four five"]


FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*$", re.MULTILINE)


@st.composite
def _replies_with_code(draw: st.DrawFn) -> str:
    """Prose paragraphs and fenced code blocks (indented lines, a language or none)."""
    word = st.text(alphabet="abcdefghij🙂é", min_size=1, max_size=9)
    blocks = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            blocks.append(" ".join(draw(st.lists(word, min_size=1, max_size=40))) + ".")
        else:
            language = draw(st.sampled_from(["", "python", "sh"]))
            lines = [
                " " * draw(st.integers(0, 8))
                + " ".join(draw(st.lists(word, min_size=1, max_size=4)))
                for _ in range(draw(st.integers(1, 30)))
            ]
            blocks.append("\n".join([f"```{language}", *lines, "```"]))
    return "\n\n".join(blocks)


# Found by CI: a block opening late in a part was cut mid-line.
CUT_MID_LINE = (
    "```\na\na\na\na\na\na\na\na\na\na\na\na\na a\na a a\na a a\na a\na\na a a a\na\na\na\na a a\na\na a a\na "
    "a a\n```\n\na.\n\n```\na\na\na\na\na\na\na\na a\na\na\na a a a\na a a a\na a a a\na a a a\na a\na\na a"
    "\na a a gfbé🙂geag\na a\na a e🙂gcgacja a\n      a 🙂bdhjcaéh\nieejd🙂 g🙂ébc🙂j🙂g\na a a\n  "
    " jacch fagf fjdaccc éf🙂h\n🙂fe if a cbgé🙂gébe\n     dbd gcfidfé🙂h dfec\n```\n\n```\n   "
    " ggéi🙂dfeé dabadhieg gfgc bgfchéjia\n```\n\n```\na\n```\n\na.\n\na."
)


@settings(max_examples=300, deadline=None)
@given(text=_replies_with_code(), limit=st.integers(80, 400))
@example(text=CUT_MID_LINE, limit=80)
def test_split_code_blocks_close_and_reopen_and_keep_every_line(text: str, limit: int) -> None:
    parts = split_text(text, limit, utf16_length)

    assert all(0 < utf16_length(part) <= limit for part in parts)
    for part in parts:  # every part renders on its own: its fences are balanced
        assert len(FENCE_LINE.findall(part)) % 2 == 0, part
    # Nothing lost or reordered; the fences added are fence lines only.
    without_fences = [FENCE_LINE.sub("", p) for p in (text, "\n".join(parts))]
    assert _words(without_fences[1]) == _words(without_fences[0])
    # Code lines keep their indentation: each is whole in some part.
    code_lines = [line for line in text.splitlines() if line.startswith(" ")]
    part_lines = {line for part in parts for line in part.splitlines()}
    assert all(
        line.rstrip() in part_lines for line in code_lines if utf16_length(line) < limit // 2
    )


@settings(max_examples=200, deadline=None)
@given(text=_replies_with_code(), cut=st.floats(0, 1))
def test_a_reply_cut_short_while_it_is_written_shows_its_code_blocks_closed(
    text: str, cut: float
) -> None:
    written = text[: int(len(text) * cut)]
    shown = close_fences(written)

    assert len(FENCE_LINE.findall(shown)) % 2 == 0, shown
    assert shown.startswith(written)
    assert close_fences(shown) == shown


def test_a_long_code_block_is_cut_between_lines_and_reopened_with_its_language() -> None:
    code = "\n".join(f"    print({n})  # line {n}" for n in range(200))
    text = f"Here is the script:\n\n```python\n{code}\n```\n\nRun it with care."
    parts = split_text(text, 2000)

    assert len(parts) == 3
    assert parts[0].startswith("Here is the script:\n\n```python\n    print(0)")
    assert all(p.endswith("\n```") for p in parts[:-1])
    assert all(p.startswith("```python\n    print(") for p in parts[1:])
    assert parts[-1].endswith("```\n\nRun it with care.")


# -- pacing and backoff ---------------------------------------------------------------------


async def test_pacer_spaces_sends_per_key_and_holds_after_a_limit() -> None:
    now = [100.0]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # time passes only when the pacer waits
        waits.append(seconds)
        now[0] += seconds

    pacer = Pacer(lambda: now[0], sleep)
    chat, other = Pace("chat", 0.05), Pace("other", 0.05)
    for _ in range(3):
        await pacer.wait([chat])
    await pacer.wait([other])  # a different key is not held up
    await pacer.hold([chat], 0.2)
    await pacer.wait([chat])

    assert waits == pytest.approx([0.05, 0.05, 0.2])
    assert now[0] == pytest.approx(100.3)


async def test_replicas_share_one_schedule_in_redis(redis_url: str) -> None:
    # Two replicas' pacers, each sending three parts to one chat at once: the chat's
    # interval holds between all six, not per replica.
    interval = 0.2
    first, second = RedisPacer(redis_url), RedisPacer(redis_url)
    chat, bot = Pace(("telegram", CHAT), interval), Pace(("telegram",), 0.01)
    loop = asyncio.get_running_loop()
    sent: list[float] = []

    async def send_three(pacer: RedisPacer) -> None:
        for _ in range(3):
            await pacer.wait([chat, bot])
            sent.append(loop.time())

    try:
        await asyncio.gather(send_three(first), send_three(second))
        await second.hold([chat], 0.5)  # a 429 seen by one replica holds the other too
        held = loop.time()
        await first.wait([chat])
        after_hold = loop.time() - held
    finally:
        await first.aclose()
        await second.aclose()

    gaps = [b - a for a, b in itertools.pairwise(sorted(sent))]
    assert len(gaps) == 5
    assert min(gaps) >= interval - 0.03  # Redis' clock and ours tick apart by a little
    assert after_hold >= 0.5 - 0.03


async def test_without_redis_a_replica_paces_on_its_own() -> None:
    pacer = RedisPacer("redis://127.0.0.1:1/0")  # nothing listens on port 1
    loop = asyncio.get_running_loop()
    chat = Pace(("telegram", CHAT), 0.2)
    try:
        started = loop.time()
        for _ in range(3):
            await pacer.wait([chat])
        took = loop.time() - started
    finally:
        await pacer.aclose()

    assert took >= 0.4 - 0.03  # the two later sends each waited their interval


def test_backoff_doubles_up_to_its_ceiling_with_full_jitter() -> None:
    policy = RetryPolicy(max_attempts=8, base_seconds=1.0, max_seconds=5.0)
    for failures, ceiling in zip(range(1, 6), [1.0, 2.0, 4.0, 5.0, 5.0], strict=True):
        waits = [policy.backoff(failures) for _ in range(200)]
        assert all(0 <= wait <= ceiling for wait in waits)
        assert max(waits) > ceiling / 2


# -- end to end ---------------------------------------------------------------------------


async def test_a_long_telegram_reply_arrives_in_order_through_a_429(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    text = _long_reply()
    llm.script(Reply(text))
    async with platform_gateway(database_url, tmp_path, llm) as p:
        p.tg.fail("sendMessage", None, flood(retry_after=1))  # the second part is throttled
        await p.telegram(tg.text_update(CHAT, "tell me everything"))
        await p.tg.wait_until(lambda f: len(f.texts(CHAT)) == 3)
        messages = await eventually(p.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent")

    parts = p.tg.texts(CHAT)
    assert len(text) == 10_000
    assert all(utf16_length(part) <= 4096 for part in parts)
    assert _words(" ".join(parts)) == _words(text)
    assert len(p.tg.calls_of("sendMessage")) == 4  # three parts, one of them twice
    assert messages[-1]["text"] == text  # stored whole, once


async def test_a_long_whatsapp_reply_arrives_in_order_through_130429_and_5xx(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    text = _long_reply(seed=2)
    llm.script(Reply(text))
    async with platform_gateway(database_url, tmp_path, llm) as p:
        p.wa.fail(
            None,
            GraphFail(429, 130429, "(#130429) Rate limit hit"),
            GraphFail(503, 1, "Service temporarily unavailable"),
        )
        await p.whatsapp(wa.message_notification(PERSON, text="tell me everything"))
        await p.wa.wait_until(lambda f: len(f.texts(PERSON)) == 3)
        await eventually(p.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent")

    parts = p.wa.texts(PERSON)
    assert all(utf16_length(part) <= 4096 for part in parts)
    assert _words(" ".join(parts)) == _words(text)
    assert p.wa.attempts == 5


async def test_after_n_failures_the_reply_is_failed_with_the_platform_reason(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with platform_gateway(database_url, tmp_path, llm, delivery_max_attempts=3) as p:
        p.tg.fail("sendMessage", *[TgFail(500, "Internal Server Error: try later")] * 3)
        await p.telegram(tg.text_update(CHAT, "hello?"))
        messages = await eventually(
            p.all_messages, until=lambda ms: len(ms) == 2 and ms[1]["delivery"] == "failed"
        )

    assert len(p.tg.calls_of("sendMessage")) == 3
    assert messages[1]["delivery_error"] == (
        "Telegram did not take the message: Internal Server Error: try later"
    )


async def test_a_refusal_is_not_retried(database_url: str, tmp_path: Path, llm: FakeLLM) -> None:
    async with platform_gateway(database_url, tmp_path, llm) as p:
        p.tg.fail("sendMessage", TgFail(403, "Forbidden: bot was blocked by the user"))
        await p.telegram(tg.text_update(CHAT, "bye"))
        messages = await eventually(
            p.all_messages, until=lambda ms: len(ms) == 2 and ms[1]["delivery"] == "failed"
        )

    assert len(p.tg.calls_of("sendMessage")) == 1
    assert "bot was blocked by the user" in messages[1]["delivery_error"]


async def test_a_reply_cut_short_by_a_shutdown_is_finished_after_restart_without_repeats(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    text = _long_reply(seed=3)
    llm.script(Reply(text))
    async with tg.fake_telegram() as fake:
        before = await _first_part_then_down(database_url, tmp_path, llm, fake, tries=4)
        fake.clear_failures()
        async with platform_gateway(database_url, tmp_path, llm, tg=fake) as p:
            await fake.wait_until(lambda f: len(f.texts(CHAT)) == 3)
            after = await eventually(p.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent")

    assert before[-1]["delivery"] == "pending"
    parts = fake.texts(CHAT)
    assert len(parts) == len(set(parts)) == 3  # the first part was not sent again
    assert _words(" ".join(parts)) == _words(text)
    assert len(llm.requests) == 1  # the turn was not run again either
    assert len(after) == 2


async def _first_part_then_down(
    database_url: str, tmp_path: Path, llm: FakeLLM, fake: tg.FakeTelegram, *, tries: int
) -> list[dict[str, Any]]:
    """Ask for a long reply; Telegram takes its first part, then fails until the
    gateway stops. The stored messages as the gateway left them."""
    fake.fail("sendMessage", None, *[TgFail(502, "Bad Gateway")] * 1000)
    async with platform_gateway(
        database_url, tmp_path, llm, tg=fake, delivery_max_attempts=100
    ) as p:
        await p.telegram(tg.text_update(CHAT, "a long story, please"))
        await fake.wait_until(lambda f: len(f.calls_of("sendMessage")) >= tries)
        return await p.all_messages()


@pytest.mark.parametrize(("policy", "sent"), [("resend", [0, 1, 2]), ("skip", [0, 2])])
async def test_a_part_in_flight_at_a_crash_is_resent_or_skipped_by_policy_and_counted(
    database_url: str, tmp_path: Path, llm: FakeLLM, policy: str, sent: list[int]
) -> None:
    text = _long_reply(seed=4)
    parts = split_text(text, 4096, utf16_length)
    assert len(parts) == 3
    llm.script(Reply(text))
    async with tg.fake_telegram() as fake:
        reply = (await _first_part_then_down(database_url, tmp_path, llm, fake, tries=3))[-1]
        # What a SIGKILL during the send of part 1 leaves behind: part 0 recorded, part 1
        # marked as in flight and never settled.
        engine = create_engine(database_url)
        async with engine.begin() as connection:
            await connection.execute(
                update(Message)
                .where(Message.seq == reply["seq"], Message.delivery_parts_sent == 1)
                .values(delivery_sending_part=1)
            )
        await engine.dispose()
        fake.clear_failures()
        async with platform_gateway(
            database_url, tmp_path, llm, tg=fake, delivery_uncertain=policy
        ) as p:
            await eventually(p.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent")
            await p.telegram(tg.text_update(CHAT, "/status"))
            await fake.wait_until(lambda f: "in doubt" in f.texts(CHAT)[-1])

    *delivered, status = fake.texts(CHAT)
    assert delivered == [parts[i] for i in sent]
    assert "Reply parts in doubt after a restart: 1" in status


@LANES_NEED_POSTGRES
async def test_a_replica_starting_mid_delivery_leaves_the_lane_to_its_worker(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    text = _long_reply()
    llm.script(Reply(text))
    async with (
        tg.fake_telegram() as fake,
        platform_gateway(database_url, tmp_path / "a", llm, tg=fake) as a,
    ):
        fake.fail("sendMessage", None, flood(retry_after=2))  # part 2 waits two seconds
        await a.telegram(tg.text_update(CHAT, "tell me everything"))
        await fake.wait_until(lambda f: len(f.calls_of("sendMessage")) == 2)
        # A second replica starts while the first one's lane waits out the 429: its
        # start submits every pending reply, this one included.
        async with platform_gateway(database_url, tmp_path / "b", llm, tg=fake) as b:
            await fake.wait_until(lambda f: len(f.texts(CHAT)) == 3, seconds=30)
            messages = await eventually(
                a.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent"
            )
            for replica in (a, b):  # both done: nothing more would go out
                outbox = replica.gw.services.outbox
                await eventually(functools.partial(_busy, outbox), until=lambda busy: not busy)

    parts = fake.texts(CHAT)
    assert "".join(parts).replace("\n", "") == text.replace("\n", "")
    assert len(parts) == 3  # each part once, in order
    assert messages[-1]["delivery"] == "sent"


@LANES_NEED_POSTGRES
async def test_a_replica_whose_lane_was_taken_while_it_stalled_sends_no_more_parts(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    text = _long_reply()
    llm.script(Reply(text))
    clock = ManualClock(datetime.now(UTC))
    async with (
        tg.fake_telegram() as fake,
        platform_gateway(database_url, tmp_path, llm, tg=fake, clock=clock) as p,
    ):
        fake.gate = asyncio.Event()  # the first part waits at Telegram
        await p.telegram(tg.text_update(CHAT, "tell me everything"))
        await fake.wait_until(lambda f: len(f.calls_of("sendMessage")) == 1)
        # This replica stalls past its lane's lease, and another replica takes the lane.
        ttl = timedelta(seconds=p.gw.services.settings.turn_lease_seconds)
        clock.advance(ttl + timedelta(seconds=1))
        sessions = session_factory(p.gw.services.engine)
        async with sessions() as session:
            (lane,) = await session.scalars(select(Lease.name).where(Lease.name.like("lane:%")))
        taken = await Leases(sessions, clock.now, holder="other replica").claim(lane, ttl)
        fake.gate.set()  # the part in flight lands
        await eventually(functools.partial(_busy, p.gw.services.outbox), until=lambda b: not b)
        messages = await p.all_messages()

    assert taken
    assert fake.texts(CHAT) == split_text(text, 4096, utf16_length)[:1]
    assert messages[-1]["delivery"] == "pending"  # the lane's new holder sends the rest


async def _busy(outbox: Outbox) -> bool:
    return outbox.busy


async def test_pending_replies_come_with_their_trigger_and_chat(database_url: str) -> None:
    # What the sweep reads every few seconds, a page per query.
    engine = create_engine(database_url)
    repos = Repositories.open(session_factory(engine), count_tokens=message_tokens, now=_now)
    try:
        ada = await repos.identities.resolve_identity(
            "telegram", "42", display_name="Ada", timezone="UTC", now=_now()
        )
        group = await repos.conversations.group_conversation(
            "telegram", "-1001", title="Family", now=_now()
        )
        pending = []
        for conversation, key in ((ada.conversation_id, "42:1"), (group, "-1001:7")):
            asked, _ = await repos.messages.add_message(
                conversation,
                NewMessage(
                    Role.USER,
                    "telegram",
                    "hi",
                    identity_id=ada.identity_id,
                    platform_message_id=key,
                ),
                now=_now(),
            )
            for delivery in (Delivery.SENT, Delivery.PENDING):
                reply, _ = await repos.messages.add_message(
                    conversation,
                    NewMessage(
                        Role.ASSISTANT,
                        "telegram",
                        "hello",
                        reply_to_seq=asked.seq,
                        delivery=delivery,
                    ),
                    now=_now(),
                )
            pending.append((reply.id, asked.seq, key))
        everything = await repos.messages.pending_replies()
        second_page = await repos.messages.pending_replies(after_id=everything[0].reply.id)
    finally:
        await engine.dispose()

    triggers = [p.trigger for p in everything]
    assert all(t is not None for t in triggers)
    assert [
        (p.reply.id, t.seq, t.platform_message_id)
        for p, t in zip(everything, triggers, strict=True)
        if t is not None
    ] == pending
    assert [(p.external_user_id, p.group_id) for p in everything] == [("42", None), ("42", "-1001")]
    assert [p.reply.id for p in second_page] == [pending[1][0]]


def _now() -> datetime:
    return datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
