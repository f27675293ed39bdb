"""Archive jobs on real arq workers and real Redis: killed workers and a flushed queue
lose nothing, and no chunk is summarised twice."""

from __future__ import annotations

import asyncio
import re
import signal
import uuid
from pathlib import Path
from typing import Any

import httpx

from gateway.jobs.arq_worker import build_worker
from memory.storage.models import ChunkStatus
from tests.fakes.llm_server import Behaviour, FakeLLM, Hang, Reply
from tests.support.archive_checks import is_summary_request, marked_text
from tests.support.harness import Gateway, make_settings, running_gateway
from tests.support.polling import eventually
from tests.support.process import free_port, parley_env, start_parley, stop_process
from tests.support.redis import flush

SMALL_MODEL = {"llm_context_tokens": 16_000}


async def _fill_until_a_chunk_is_cut(gw: Gateway, token: str, conversation_id: uuid.UUID) -> int:
    for number in range(1, 30):
        await gw.send(token, marked_text(number, 600))
        chunks = await gw.services.archive.chunks(conversation_id)
        if chunks:
            return chunks[0].id
    raise AssertionError("no chunk was cut")


def _worker_env(
    data_dir: Path, database_url: str, redis_url: str, llm: FakeLLM, **extra: str
) -> dict[str, str]:
    """What `parley worker` runs with beside the test's gateway (the same small model)."""
    return parley_env(
        data_dir=str(data_dir),
        database_url=database_url,
        redis_url=redis_url,
        llm_provider="openai",
        llm_base_url=llm.openai_base,
        llm_api_key="sk-test",
        llm_context_tokens=str(SMALL_MODEL["llm_context_tokens"]),
        **extra,
    )


def _summaries_of(requests: list[dict[str, Any]], marker: str) -> int:
    return sum(
        is_summary_request(r) and marker in str(r["messages"][-1]["content"]) for r in requests
    )


async def test_a_worker_killed_mid_summary_loses_nothing_and_summarises_once(
    database_url: str, tmp_path: Path, llm: FakeLLM, redis_url: str
) -> None:
    hung_once = False

    def respond(body: dict[str, Any], number: int) -> Behaviour | None:
        nonlocal hung_once
        if is_summary_request(body):
            if not hung_once:
                hung_once = True
                return Hang()
            return Reply(f"summary from request {number}")
        return None

    llm.responder = respond
    settings = make_settings(
        database_url, tmp_path, llm, redis_url=redis_url, job_lease_seconds=2, **SMALL_MODEL
    )
    env = _worker_env(tmp_path, database_url, redis_url, llm, job_lease_seconds="2")
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        conversation_id = uuid.UUID(conversation)
        chunk_id = await _fill_until_a_chunk_is_cut(gw, token, conversation_id)

        first = await start_parley("worker", env=env, cwd=tmp_path)
        try:
            await llm.wait_until(lambda rs: _summaries_of(rs, "m00001") == 1, seconds=30)
        finally:
            await stop_process(first, signal.SIGKILL)
        second = await start_parley("worker", env=env, cwd=tmp_path)
        try:
            chunk = await eventually(
                lambda: gw.services.archive.chunk(chunk_id),
                until=lambda c: c is not None and c.status is ChunkStatus.READY,
                seconds=60,
            )
        finally:
            await stop_process(second, signal.SIGTERM, seconds=20)

    assert chunk is not None
    assert _summaries_of(llm.requests, "m00001") == 2  # the killed attempt, then one more
    summary_requests = [i for i, r in enumerate(llm.requests, 1) if is_summary_request(r)]
    assert chunk.summary == f"summary from request {summary_requests[1]}"
    assert chunk.attempts == 2


async def test_a_flushed_queue_is_refilled_from_the_database(
    database_url: str, tmp_path: Path, llm: FakeLLM, redis_url: str
) -> None:
    settings = make_settings(database_url, tmp_path, llm, redis_url=redis_url, **SMALL_MODEL)
    async with running_gateway(settings) as gw:
        token, conversation = await gw.visitor()
        conversation_id = uuid.UUID(conversation)
        for number in range(1, 13):
            await gw.send(token, marked_text(number, 600))
        pending = await gw.services.archive.chunks(conversation_id)
        assert pending
        assert all(c.status is ChunkStatus.PENDING for c in pending)

        await flush(redis_url)  # every queued job is gone
        worker = build_worker(settings, burst=True, poll_delay=0)
        try:
            await asyncio.wait_for(worker.async_run(), 60)
        finally:
            await worker.close()
        chunks = await gw.services.archive.chunks(conversation_id)

    assert {c.id for c in pending} <= {c.id for c in chunks}
    assert all(c.status is ChunkStatus.READY for c in chunks)
    assert sum(is_summary_request(r) for r in llm.requests) == len(chunks)


async def test_a_worker_serves_the_tokens_of_its_summaries_on_its_own_metrics(
    database_url: str, tmp_path: Path, llm: FakeLLM, redis_url: str
) -> None:
    """`parley worker` with PARLEY_WORKER_METRICS_PORT: the model calls of its summaries
    are counted as the gateway counts its own, and served there."""
    llm.responder = lambda body, number: (
        Reply(f"summary from request {number}") if is_summary_request(body) else None
    )
    settings = make_settings(database_url, tmp_path, llm, redis_url=redis_url, **SMALL_MODEL)
    port = free_port()
    env = _worker_env(tmp_path, database_url, redis_url, llm, worker_metrics_port=str(port))
    async with running_gateway(settings) as gw, httpx.AsyncClient() as client:
        token, conversation = await gw.visitor()
        chunk_id = await _fill_until_a_chunk_is_cut(gw, token, uuid.UUID(conversation))
        worker = await start_parley("worker", env=env, cwd=tmp_path)
        try:
            await eventually(
                lambda: gw.services.archive.chunk(chunk_id),
                until=lambda c: c is not None and c.status is ChunkStatus.READY,
                seconds=60,
            )
            served = await client.get(f"http://127.0.0.1:{port}/metrics")
        finally:
            await stop_process(worker, signal.SIGTERM, seconds=20)

    prompt = re.search(r'^parley_model_tokens_total\{kind="prompt"\} (\S+)$', served.text, re.M)
    assert served.status_code == 200
    assert prompt is not None, served.text[:500]
    assert float(prompt.group(1)) > 0
