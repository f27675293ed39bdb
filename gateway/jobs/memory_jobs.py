"""The archive wired into the gateway: around each turn, and as runnable jobs."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextvars import ContextVar
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from gateway.clock import Clock
from gateway.llm import ChatTurn, LLMProvider, Prompt, Usage, complete_counted
from gateway.llm.base import ImagePart
from gateway.replicas.lease_keeper import hold, keep
from gateway.settings import LLMProviderName, Settings
from gateway.turns.answering import TurnContext
from gateway.wiring import profile_limits
from memory.archive.archive import Archive
from memory.archive.reads import NewChunk
from memory.archive.summarize import ExtractiveSummarizer, ModelSummarizer, Summarizer, TextModel
from memory.archive.transcript import transcript_path, write_transcript
from memory.archive.upkeep import (
    EXTRACT,
    ROLLUP,
    SUMMARIZE,
    ArchiveJobs,
    Enqueue,
    RetryPolicy,
    rollup_key,
    summarize_key,
)
from memory.profile.profiles import Profiles
from memory.profile.upkeep import TIDY, ProfileJobs
from memory.storage.attachments import Attachments, ImageToDescribe
from memory.storage.leases import LeaseLost, Leases
from memory.storage.messages import Messages
from memory.storage.models import UsageKind
from memory.storage.repositories import Repositories
from memory.storage.usage_days import UsageLedger

T = TypeVar("T")

# Whose memory a background job keeps: the model calls it makes are charged to them.
# Set by `MemoryJobs` around each job, read by `ProviderTextModel`, so the memory's
# jobs need not carry an account they have no use for.
Charge = Callable[[list[Usage]], Awaitable[None]]
_charged: ContextVar[Charge | None] = ContextVar("charged", default=None)


DESCRIBE = "describe"
DESCRIBE_SYSTEM = (
    "Describe the image for someone who cannot see it, in one or two plain sentences: "
    "what it shows, and any words written in it. No preamble."
)
# What a description is cut to: it stands in for the image in every later prompt.
DESCRIPTION_CHARS = 400


async def _charge(usage: list[Usage]) -> None:
    charge = _charged.get()
    if usage and charge is not None:
        await charge(usage)


class Describer:
    """Writes an image's description with a model that sees."""

    def __init__(self, provider: LLMProvider, attachments: Attachments) -> None:
        self._provider = provider
        self.attachments = attachments

    async def describe(self, found: ImageToDescribe) -> None:
        image = found.image
        shown = ImagePart(image.mime, image.data, image.width, image.height)
        request = Prompt(
            DESCRIBE_SYSTEM, (ChatTurn("user", "Describe this image.", images=(shown,)),), 200
        )
        text, usage = await complete_counted(self._provider, request)
        await _charge(usage)
        description = " ".join(text.split())[:DESCRIPTION_CHARS]
        if description:
            await self.attachments.describe(image.id, description)


class ProviderTextModel:
    """A language model provider as the summariser's `TextModel`."""

    def __init__(self, provider: LLMProvider, model: str | None) -> None:
        self._provider = provider
        self._model = model

    async def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        request = Prompt(system, (ChatTurn("user", prompt),), max_tokens, model=self._model)
        text, usage = await complete_counted(self._provider, request)
        await _charge(usage)
        return text


@contextlib.contextmanager
def _charging(charge: Charge) -> Iterator[None]:
    token = _charged.set(charge)
    try:
        yield
    finally:
        _charged.reset(token)


class MemoryJobs:
    """Every background job of the memory, one typed method each, and by queue name
    (`run`, for the embedded runner and the arq worker alike)."""

    def __init__(
        self,
        archive: ArchiveJobs,
        profile: ProfileJobs,
        leases: Leases,
        lease: timedelta,
        ledger: UsageLedger | None = None,
        clock: Clock | None = None,
        describer: Describer | None = None,
    ) -> None:
        """`ledger`: where the jobs' model calls are charged (None: nowhere);
        `describer`: None where no model sees images."""
        self._describer = describer
        self._archive = archive
        self._profile = profile
        self._leases = leases
        self._lease = lease
        self._ledger = ledger
        self._clock = clock

    async def run(self, job: str, arg: str) -> None:
        try:
            handler = JOBS[job]
        except KeyError:
            raise ValueError(f"unknown job {job!r}") from None
        await handler(self, arg)

    async def summarize(self, chunk_id: int) -> None:
        # The chunk's own lease says who summarises it.
        with self._charged(conversation_id=await self._archive.conversation_of(chunk_id)):
            await self._archive.summarize(chunk_id)

    async def rollup(self, conversation_id: uuid.UUID) -> None:
        with self._charged(conversation_id=conversation_id):
            await self._leased(f"{ROLLUP}:{conversation_id}", self._archive.rollup, conversation_id)

    async def extract(self, chunk_id: int) -> None:
        with self._charged(conversation_id=await self._archive.conversation_of(chunk_id)):
            await self._leased(f"{EXTRACT}:{chunk_id}", self._profile.extract, chunk_id)

    async def tidy(self, user_id: uuid.UUID) -> None:
        with self._charged(user_id=user_id):
            await self._leased(f"{TIDY}:{user_id}", self._profile.tidy, user_id)

    async def describe(self, attachment_id: int) -> None:
        """Have a model that sees write an image's description, once (DESIGN §11): what
        the image is told as where it is not shown (older messages, transcripts,
        summaries, a model that does not see)."""
        if self._describer is None:
            return
        found = await self._describer.attachments.to_describe(attachment_id)
        if found is None:
            return  # described already, gone, or not an image ready to be seen
        with self._charged(conversation_id=found.conversation_id):
            await self._leased(f"{DESCRIBE}:{attachment_id}", self._describer.describe, found)

    def _charged(
        self, *, conversation_id: uuid.UUID | None = None, user_id: uuid.UUID | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Around a job: its model calls charged to the person, or to whoever pays for
        the conversation."""
        ledger, clock = self._ledger, self._clock
        if ledger is None or clock is None or (conversation_id is None and user_id is None):
            return contextlib.nullcontext()

        async def charge(usage: list[Usage]) -> None:
            if user_id is not None:
                await ledger.charge_person(user_id, UsageKind.BACKGROUND, usage, clock.now())
            elif conversation_id is not None:
                await ledger.charge_conversation(
                    conversation_id, UsageKind.BACKGROUND, usage, clock.now()
                )

        return _charging(charge)

    async def _leased(
        self, name: str, work: Callable[[T], Coroutine[Any, Any, None]], arg: T
    ) -> None:
        # A queue may hand out the same job twice (a retry of one whose worker died,
        # the sweep); the lease lets one run and the others return at once. One that
        # loses its lease midway stops: the new holder, or the next sweep, does it.
        async with hold(self._leases, f"job:{name}", self._lease) as lease:
            if lease is not None:
                with contextlib.suppress(LeaseLost):  # the keeper said so in the log
                    await lease.guard(work(arg))

    async def sweep(self) -> int:
        return await self._archive.sweep() + await self._profile.sweep()


# Queue name -> the typed job, its argument parsed from the queue's string.
JOBS: dict[str, Callable[[MemoryJobs, str], Awaitable[None]]] = {
    SUMMARIZE: lambda jobs, arg: jobs.summarize(int(arg)),
    ROLLUP: lambda jobs, arg: jobs.rollup(uuid.UUID(arg)),
    EXTRACT: lambda jobs, arg: jobs.extract(int(arg)),
    TIDY: lambda jobs, arg: jobs.tidy(uuid.UUID(arg)),
    DESCRIBE: lambda jobs, arg: jobs.describe(int(arg)),
}


def build_jobs(
    settings: Settings,
    *,
    archive: Archive,
    repos: Repositories,
    profiles: Profiles,
    provider: LLMProvider,
    enqueue: Enqueue,
    clock: Clock,
) -> MemoryJobs:
    offline = settings.llm_provider is LLMProviderName.OFFLINE
    model = None if offline else ProviderTextModel(provider, settings.summary_model)
    archive_jobs = build_archive_jobs(
        settings,
        archive=archive,
        messages=repos.messages,
        model=model,
        enqueue=enqueue,
        clock=clock,
    )
    profile_jobs = ProfileJobs(
        profiles=profiles,
        archive=archive,
        messages=repos.messages,
        conversations=repos.conversations,
        model=model,  # the offline provider extracts nothing rather than inventing
        enqueue=enqueue,
        now=clock.now,
        limits=profile_limits(settings),
    )
    return MemoryJobs(
        archive_jobs,
        profile_jobs,
        repos.leases,
        timedelta(seconds=settings.job_lease_seconds),
        ledger=repos.usage,
        clock=clock,
        describer=Describer(provider, repos.attachments) if provider.sees_images else None,
    )


def build_archive_jobs(
    settings: Settings,
    *,
    archive: Archive,
    messages: Messages,
    model: TextModel | None,
    enqueue: Enqueue,
    clock: Clock,
) -> ArchiveJobs:
    """The summarising half of `build_jobs`; `model` None: summaries are extracts."""
    summarizer: Summarizer = (
        ExtractiveSummarizer()
        if model is None
        else ModelSummarizer(model, window_tokens=archive.limits.summary_window_tokens)
    )
    return ArchiveJobs(
        archive=archive,
        messages=messages,
        summarizer=summarizer,
        enqueue=enqueue,
        now=clock.now,
        lease=timedelta(seconds=settings.job_lease_seconds),
        keep=keep,
        retry=RetryPolicy(
            settings.archive_retry_base_seconds,
            settings.archive_retry_max_seconds,
            settings.archive_notify_after,
        ),
        sweep_grace=timedelta(seconds=settings.sweep_interval_seconds * 3),
    )


class ArchiveMemory:
    """The runner's `TurnMemory`: swap finished chunks in and read the timeline and
    profile before a turn; cut chunks after it."""

    def __init__(
        self,
        archive: Archive,
        profiles: Profiles,
        enqueue: Enqueue,
        clock: Clock,
        archive_dir: Path,
    ) -> None:
        self._archive = archive
        self._profiles = profiles
        self._enqueue = enqueue
        self._clock = clock
        self._archive_dir = archive_dir

    async def before_turn(self, conversation_id: uuid.UUID) -> TurnContext:
        swapped, timeline = await self._archive.prepare_turn(conversation_id)
        if swapped:
            await self._enqueue(ROLLUP, str(conversation_id), key=rollup_key(conversation_id))
        # A group never sees a member's personal profile.
        return TurnContext(tuple(timeline), await self._profiles.of_conversation(conversation_id))

    async def after_turn(
        self, conversation_id: uuid.UUID, live_tokens: int, undescribed: tuple[int, ...] = ()
    ) -> None:
        for attachment_id in undescribed:
            await self._enqueue(DESCRIBE, str(attachment_id), key=f"{DESCRIBE}:{attachment_id}")
        if live_tokens <= self._archive.limits.live_window_tokens:
            return  # the live window (a superset of what is unarchived) is within limits
        for chunk in await self._archive.cut(conversation_id, self._clock.now()):
            await asyncio.to_thread(self._save, chunk)
            await self._enqueue(SUMMARIZE, str(chunk.id), key=summarize_key(chunk.id, 0))

    def _save(self, chunk: NewChunk) -> None:
        if chunk.transcript is not None:
            path = transcript_path(
                self._archive_dir, chunk.conversation_id, chunk.id, chunk.time_start
            )
            write_transcript(path, chunk.transcript)
