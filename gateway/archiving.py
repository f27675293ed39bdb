"""The archive wired into the gateway: around each turn, and as runnable jobs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from gateway.clock import Clock
from gateway.jobqueue import JobQueue
from gateway.llm import ChatTurn, LLMProvider, Prompt, complete
from gateway.settings import LLMProviderName, Settings
from memory.archive import Archive, ChunkView, NewChunk
from memory.jobs import (
    ROLLUP,
    SUMMARIZE,
    ArchiveJobs,
    Enqueue,
    RetryPolicy,
    rollup_key,
    summarize_key,
)
from memory.limits import MemoryLimits
from memory.store import Store
from memory.summarize import ExtractiveSummarizer, ModelSummarizer, Summarizer
from memory.transcript import transcript_path, write_transcript


def memory_limits(settings: Settings) -> MemoryLimits:
    configured = MemoryLimits(
        live_window_tokens=settings.live_window_tokens,
        chunk_tokens=settings.chunk_tokens,
        chunk_min_tokens=settings.chunk_min_tokens,
        summary_tokens=settings.summary_tokens,
        summary_window_tokens=settings.summary_window_tokens or settings.llm_context_tokens // 2,
        consolidate_at=settings.consolidate_at,
        consolidate_count=settings.consolidate_count,
        rollup_keep=settings.rollup_keep,
        rollup_batch=settings.rollup_batch,
    )
    return configured.scaled(settings.llm_context_tokens)


class ProviderTextModel:
    """A language model provider as the summariser's `TextModel`."""

    def __init__(self, provider: LLMProvider, model: str | None) -> None:
        self._provider = provider
        self._model = model

    async def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        request = Prompt(system, (ChatTurn("user", prompt),), max_tokens, model=self._model)
        return await complete(self._provider, request)


def build_summarizer(settings: Settings, provider: LLMProvider, limits: MemoryLimits) -> Summarizer:
    if settings.llm_provider is LLMProviderName.OFFLINE:
        return ExtractiveSummarizer()
    model = ProviderTextModel(provider, settings.summary_model)
    return ModelSummarizer(model, window_tokens=limits.summary_window_tokens)


def build_jobs(
    settings: Settings,
    *,
    archive: Archive,
    store: Store,
    provider: LLMProvider,
    enqueue: Enqueue,
    clock: Clock,
) -> ArchiveJobs:
    return ArchiveJobs(
        archive=archive,
        store=store,
        summarizer=build_summarizer(settings, provider, archive.limits),
        enqueue=enqueue,
        now=clock.now,
        lease=timedelta(seconds=settings.job_lease_seconds),
        retry=RetryPolicy(
            settings.archive_retry_base_seconds,
            settings.archive_retry_max_seconds,
            settings.archive_notify_after,
        ),
        sweep_grace=timedelta(seconds=settings.sweep_interval_seconds * 3),
    )


class ArchiveMemory:
    """The runner's `TurnMemory`: swap finished chunks in before a turn, cut after it."""

    def __init__(self, archive: Archive, queue: JobQueue, clock: Clock, archive_dir: Path) -> None:
        self._archive = archive
        self._queue = queue
        self._clock = clock
        self._archive_dir = archive_dir

    async def before_turn(self, conversation_id: uuid.UUID) -> Sequence[ChunkView]:
        if await self._archive.swap(conversation_id):
            await self._queue.enqueue(ROLLUP, str(conversation_id), key=rollup_key(conversation_id))
        return await self._archive.timeline(conversation_id)

    async def after_turn(self, conversation_id: uuid.UUID) -> None:
        for chunk in await self._archive.cut(conversation_id, self._clock.now()):
            await asyncio.to_thread(self._save, chunk)
            await self._queue.enqueue(SUMMARIZE, str(chunk.id), key=summarize_key(chunk.id, 0))

    def _save(self, chunk: NewChunk) -> None:
        if chunk.transcript is not None:
            path = transcript_path(
                self._archive_dir, chunk.conversation_id, chunk.id, chunk.time_start
            )
            write_transcript(path, chunk.transcript)
