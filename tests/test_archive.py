"""The archive around real turns: swapping, failure and recovery, summaries from the
whole text, status, and reading below a summary."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from gateway.jobs.memory_jobs import ProviderTextModel
from gateway.jobs.queue import EmbeddedQueue
from gateway.llm.openai import OpenAIProvider
from memory.archive.cuts import plan_cut
from memory.archive.numbers import MemoryLimits
from memory.archive.summarize import ModelSummarizer
from memory.archive.upkeep import ARCHIVE_TROUBLE_NOTICE
from memory.storage.messages import StoredMessage
from memory.storage.models import ChunkStatus, Role
from memory.token_count import estimate_tokens
from tests.fakes.llm_server import Behaviour, Fail, FakeLLM, Reply
from tests.support.archive_checks import (
    chat_requests,
    check_levels,
    check_prompt,
    is_summary_request,
    marked_text,
)
from tests.support.harness import Gateway, make_settings, running_gateway
from tests.support.messages import stored
from tests.support.polling import eventually

SMALL_MODEL = {"llm_context_tokens": 16_000}  # live window 2,500; chunks 1,250 tokens


def _message(seq: int, role: Role, tokens: int) -> StoredMessage:
    return stored(seq, role, tokens=tokens)


def test_cut_takes_whole_exchanges_from_the_oldest_and_spares_unanswered() -> None:
    limits = MemoryLimits(live_window_tokens=100, chunk_tokens=40, chunk_min_tokens=20)
    roles = [Role.USER, Role.ASSISTANT] * 6
    messages = [_message(i + 1, role, 15) for i, role in enumerate(roles)]  # 180 tokens
    slices = plan_cut(messages, answered_seq=12, limits=limits)
    assert [[m.seq for m in s] for s in slices] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    # A slice never ends between a question and its answer.
    assert all(s[-1].role is Role.ASSISTANT for s in slices)
    # Messages still waiting for a reply are never archived.
    assert plan_cut(messages, answered_seq=0, limits=limits) == []


def test_cut_keeps_a_giant_message_whole() -> None:
    limits = MemoryLimits(live_window_tokens=100, chunk_tokens=40, chunk_min_tokens=20)
    messages = [_message(1, Role.USER, 500), _message(2, Role.ASSISTANT, 5)]
    assert [[m.seq for m in s] for s in plan_cut(messages, 2, limits)] == [[1, 2]]


async def test_summaries_of_long_text_are_written_in_parts_then_combined(llm: FakeLLM) -> None:
    provider = OpenAIProvider(
        base_url=llm.openai_base,
        api_key=None,
        model="m",
        timeout=10,
        max_retries=0,
        retry_base_seconds=0,
    )
    summarizer = ModelSummarizer(ProviderTextModel(provider, "summary-model"), window_tokens=2_000)
    lines = [f"line {i:04d} " + "word " * 40 for i in range(300)]  # ~16k tokens
    try:
        summary = await summarizer.summarize("\n".join(lines), kind="chunk", target_tokens=200)
    finally:
        await provider.aclose()

    prompts = [str(r["messages"][-1]["content"]) for r in llm.requests]
    *parts, combine = prompts
    assert len(parts) >= 8
    assert all(estimate_tokens(p) <= 2_000 for p in prompts)
    for line in lines:  # nothing truncated: every line was read in some part
        assert sum(line in p for p in parts) == 1
    assert combine.startswith("These are summaries of consecutive parts")
    assert summary == f"reply {len(prompts)}"
    assert {r["model"] for r in llm.requests} == {"summary-model"}


async def _fill(gw: Gateway, token: str, count: int, start: int = 1) -> dict[int, int]:
    seq_of = {}
    for number in range(start, start + count):
        response = await gw.send(token, marked_text(number, 600))
        assert response.status_code == 200, response.text
        seq_of[number] = response.json()["message"]["seq"]
    return seq_of


async def test_the_swap_is_atomic_while_summaries_finish_during_turns(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    # Summaries finish while turns run: each summary request is held until a later
    # chat request (a turn in progress) arrives.
    held: list[asyncio.Event] = []

    def respond(body: dict[str, Any], number: int) -> Behaviour | None:
        if is_summary_request(body):
            gate = asyncio.Event()
            held.append(gate)
            return Reply(f"summary {number}", gate=gate)
        for gate in held[:-1]:  # the newest summary finishes during a later turn
            gate.set()
        return None

    llm.responder = respond
    settings = make_settings(database_url, tmp_path, llm, **SMALL_MODEL)
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        seq_of: dict[int, int] = {}
        for number in range(1, 61):
            seq_of |= await _fill(gw, token, 1, start=number)
            # The turn's work done (its cut too), so no turn swaps chunks before the
            # check reads what the prompt was built from.
            await gw.services.runner.idle()
            await check_prompt(
                gw.services, uuid.UUID(conversation), chat_requests(llm.requests)[-1], seq_of
            )
        for gate in held:
            gate.set()
        chunks = await gw.services.archive.chunks(uuid.UUID(conversation))

    check_levels(chunks)
    assert sum(c.level == 0 and c.status is ChunkStatus.READY for c in chunks) >= 10


async def test_model_down_while_archiving_loses_nothing_and_tells_once(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    down = True

    def respond(body: dict[str, Any], number: int) -> Behaviour | None:
        return Fail(503) if down and is_summary_request(body) else None

    llm.responder = respond
    settings = make_settings(
        database_url,
        tmp_path,
        llm,
        llm_max_retries=0,
        archive_retry_base_seconds=0.05,
        archive_retry_max_seconds=0.2,
        archive_notify_after=2,
        **SMALL_MODEL,
    )
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        conversation_id = uuid.UUID(conversation)
        await _fill(gw, token, 30)
        failing = await eventually(
            lambda: gw.services.archive.chunks(conversation_id),
            until=lambda cs: any(c.status is ChunkStatus.FAILED for c in cs),
        )
        # Stuck archive: the prompt still fits the model, and nothing is dropped.
        window = settings.llm_context_tokens - settings.llm_max_reply_tokens
        assert all(
            sum(estimate_tokens(str(m["content"])) + 4 for m in r["messages"]) <= window
            for r in chat_requests(llm.requests)
        )
        assert all(c.status is not ChunkStatus.READY for c in failing)
        status = (await gw.send(token, "/status")).json()["reply"]["text"]

        down = False
        await eventually(
            lambda: gw.services.archive.chunks(conversation_id),
            until=lambda cs: bool(cs) and all(c.status is ChunkStatus.READY for c in cs),
        )
        await _fill(gw, token, 1, start=100)  # this turn swaps the backlog in
        history = await gw.whole_history(token)
        timeline = await gw.services.archive.timeline(conversation_id)

    assert "failing (retrying)" in status
    assert "Last archive error" in status
    notices = [m for m in history if m["text"] == ARCHIVE_TROUBLE_NOTICE]
    assert len(notices) == 1
    assert len([m for m in history if m["role"] == "user"]) == 32
    assert timeline, "the backlog drained into the timeline"
    last_prompt = str(chat_requests(llm.requests)[-1]["messages"][0]["content"])
    assert "(archive #" in last_prompt


async def test_status_reading_below_summaries_and_transcript_files(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    settings = make_settings(database_url, tmp_path, llm, **SMALL_MODEL)
    async with running_gateway(settings) as gw:
        queue = gw.services.queue
        assert isinstance(queue, EmbeddedQueue)
        token, conversation = await gw.visitor()
        conversation_id = uuid.UUID(conversation)
        for number in range(1, 41):
            await _fill(gw, token, 1, start=number)
            await gw.services.runner.idle()  # chunks are cut after the answer
            await queue.idle()
        archive = gw.services.archive
        chunks = await archive.chunks(conversation_id)
        parent = next(c for c in chunks if c.level == 1)
        children = await archive.children(parent.id)
        by_date = await archive.in_range(conversation_id, 0, parent.time_start, parent.time_end)
        hits = await gw.services.repos.search.search(conversation_id, "M00003", limit=20)
        transcript = await archive.transcript(children[0].id)
        archived = await archive.messages_of(children[0].id)
        status = (await gw.send(token, "/status")).json()
        after = chat_requests(llm.requests)[-1]
        await gw.send(token, "and now?")
        last = chat_requests(llm.requests)[-1]

    assert [c.parent_id for c in children] == [parent.id] * len(children)
    assert {c.id for c in children} <= {c.id for c in by_date}
    in_transcripts = [hit for hit in hits if hit.chunk_id is not None]
    assert in_transcripts
    assert all("«m00003»" in hit.snippet for hit in in_transcripts)
    assert transcript is not None
    assert all(m.text in transcript for m in archived)
    files = list((tmp_path / "archive" / conversation).glob("*.txt"))
    assert any(f.read_text() == transcript for f in files)
    assert status["reply"]["role"] == "event"
    assert "Archive consolidated chunks:" in status["reply"]["text"]
    # /status is answered by the gateway: the model saw neither it nor its answer.
    assert after is chat_requests(llm.requests)[-2]
    assert all("/status" not in str(m["content"]) for m in last["messages"])
    assert all("Live conversation" not in str(m["content"]) for m in last["messages"])
