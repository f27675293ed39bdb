"""Archive upkeep, the jobs the queue runs: summarise a chunk, roll a conversation's
levels up, sweep for work.

The functions are queue-agnostic: an embedded runner or an arq worker calls them with
a job name and one argument. Every job is idempotent and safe to run twice: the chunk
lease in the database decides who summarises, and a summary is stored only once.

The gateway keeps the chunk's lease while the model writes (`KeepLease`: memory says
how to renew it, the gateway's one lease keeper renews it on time). A renewal that
fails now and then costs nothing; a lease that is lost stops the model call, and the
summary of a claim that was overtaken is never stored (`Archive.record_summary`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, TypeVar

import structlog

from memory.archive.archive import Archive
from memory.archive.reads import Claim
from memory.archive.summarize import Kind, Summarizer
from memory.provenance import NOTICE_SOURCE
from memory.storage.leases import LeaseLost
from memory.storage.messages import Messages, NewMessage
from memory.storage.models import Role

log = structlog.get_logger(__name__)

SUMMARIZE = "summarize"
ROLLUP = "rollup"
EXTRACT = "extract"  # run by memory.profile_jobs

ARCHIVE_TROUBLE_NOTICE = (
    "I'm having trouble archiving the older part of our conversation right now. Nothing "
    "is lost: those messages stay in front of me as they are, and I'll keep trying."
)


T = TypeVar("T")


class Enqueue(Protocol):
    async def __call__(self, job: str, arg: str, *, key: str, defer: float = 0.0) -> None: ...


class KeptLease(Protocol):
    def still_held(self) -> bool:
        """Whether the lease is still ours: asked before a write."""
        ...

    async def guard(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work`, cancelled with `LeaseLost` raised if the lease is lost first."""
        ...


class KeepLease(Protocol):
    """Keep a lease, claimed at `since`, for as long as a block runs: renewed with
    `renew` (True: still ours) every so often; times on the clock `now`."""

    def __call__(
        self,
        name: str,
        renew: Callable[[], Awaitable[bool]],
        ttl: timedelta,
        *,
        since: datetime,
        now: Callable[[], datetime],
    ) -> AbstractAsyncContextManager[KeptLease]: ...


def summarize_key(chunk_id: int, attempts: int) -> str:
    # Unique per attempt: a job orphaned by a killed worker must not block the retry.
    return f"{SUMMARIZE}:{chunk_id}:{attempts}"


def rollup_key(conversation_id: uuid.UUID | str) -> str:
    return f"{ROLLUP}:{conversation_id}"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_seconds: float
    max_seconds: float
    notify_after: int

    def delay(self, attempts: int) -> float:
        return float(min(self.max_seconds, self.base_seconds * 2 ** max(0, attempts - 1)))


class ArchiveJobs:
    def __init__(
        self,
        *,
        archive: Archive,
        messages: Messages,
        summarizer: Summarizer,
        enqueue: Enqueue,
        now: Callable[[], datetime],
        lease: timedelta,
        keep: KeepLease,
        retry: RetryPolicy,
        sweep_grace: timedelta,
    ) -> None:
        self._archive = archive
        self._keep = keep
        self._messages = messages
        self._summarizer = summarizer
        self._enqueue = enqueue
        self._now = now
        self._lease = lease
        self._retry = retry
        self._sweep_grace = sweep_grace

    async def conversation_of(self, chunk_id: int) -> uuid.UUID | None:
        return await self._archive.conversation_of(chunk_id)

    async def summarize(self, chunk_id: int) -> None:
        since = self._now()
        claim = await self._archive.claim(chunk_id, since, self._lease)
        if claim is None:
            return  # summarised already, or another worker holds it
        attempt = claim.chunk.attempts  # this claim's number: it fences our writes
        renew = partial(self._renew, chunk_id, attempt)
        keeping = self._keep(f"chunk:{chunk_id}", renew, self._lease, since=since, now=self._now)
        async with keeping as lease:
            try:
                summary = await lease.guard(self._write(claim))
            except LeaseLost:
                return  # the keeper logged it; the chunk's new holder summarises it
            except Exception as exc:  # the model or the network failed: retry later
                await self._failed(claim, exc)
                return
            stored = lease.still_held() and await self._archive.record_summary(
                chunk_id, summary, self._now(), attempt=attempt
            )
        if stored:
            log.info("chunk summarised", chunk_id=chunk_id, level=claim.chunk.level)
            conversation = claim.chunk.conversation_id
            await self._enqueue(ROLLUP, str(conversation), key=rollup_key(conversation))
            if claim.chunk.level == 0:
                await self._enqueue(EXTRACT, str(chunk_id), key=f"{EXTRACT}:{chunk_id}")

    async def _write(self, claim: Claim) -> str:
        kind: Kind = "chunk" if claim.chunk.level <= 1 else "rollup"
        target = self._archive.limits.summary_tokens_at(claim.chunk.level)
        return await self._summarizer.summarize(claim.content, kind=kind, target_tokens=target)

    async def _renew(self, chunk_id: int, attempt: int) -> bool:
        return await self._archive.renew(chunk_id, attempt, self._now(), self._lease)

    async def _failed(self, claim: Claim, exc: Exception) -> None:
        chunk = claim.chunk
        attempts = chunk.attempts  # counted when the lease was claimed
        delay = self._retry.delay(attempts)
        now = self._now()
        error = f"{type(exc).__name__}: {exc}"
        log.warning("summary failed", chunk_id=chunk.id, attempts=attempts, error=error)
        tell = await self._archive.record_failure(
            chunk.id,
            error,
            now,
            now + timedelta(seconds=delay),
            attempt=attempts,
            failed=attempts >= self._retry.notify_after,
        )
        if tell:
            await self._tell(chunk.conversation_id)
        await self._enqueue(
            SUMMARIZE, str(chunk.id), key=summarize_key(chunk.id, attempts), defer=delay
        )

    async def _tell(self, conversation_id: uuid.UUID) -> None:
        channel = await self._messages.last_channel(conversation_id)
        await self._messages.add_message(
            conversation_id,
            NewMessage(
                role=Role.EVENT, channel=channel, text=ARCHIVE_TROUBLE_NOTICE, source=NOTICE_SOURCE
            ),
            now=self._now(),
        )

    async def rollup(self, conversation_id: uuid.UUID) -> None:
        for parent in await self._archive.plan_rollups(conversation_id, self._now()):
            await self._enqueue(SUMMARIZE, str(parent.id), key=summarize_key(parent.id, 0))

    async def sweep(self) -> int:
        """Queue whatever the database says is due. Returns how many jobs were queued."""
        due = await self._archive.due_chunks(self._now(), self._sweep_grace)
        for chunk_id, attempts in due:
            await self._enqueue(SUMMARIZE, str(chunk_id), key=summarize_key(chunk_id, attempts))
        conversations = await self._archive.conversations_to_roll_up()
        for conversation_id in conversations:
            await self._enqueue(ROLLUP, str(conversation_id), key=rollup_key(conversation_id))
        return len(due) + len(conversations)
