"""Work that failed or waits, and running it again on an operator's word: the memory
jobs (archive summaries, fact extractions, profile tidies) and the replies a platform
would not take."""

from __future__ import annotations

import uuid

from gateway.channels.outbox import Outbox
from gateway.clock import Clock
from gateway.errors import Busy, NotFound
from memory.archive.upkeep import EXTRACT, SUMMARIZE, Enqueue
from memory.profile.upkeep import TIDY
from memory.storage.messages import Messages, StoredMessage
from memory.storage.work import KINDS, Job, Kind, State, Work


class Retries:
    def __init__(
        self, *, work: Work, messages: Messages, outbox: Outbox, enqueue: Enqueue, clock: Clock
    ) -> None:
        self._work = work
        self._messages = messages
        self._outbox = outbox
        self._enqueue = enqueue
        self._clock = clock

    async def jobs(
        self, state: State | None, *, kind_index: int, after: str | None, limit: int
    ) -> list[Job]:
        """Jobs kind by kind (in `KINDS` order), from the `kind_index`th kind's job
        after target `after`."""
        found: list[Job] = []
        for kind in KINDS[kind_index:]:
            found += await self._work.jobs(kind, state, after=after, limit=limit - len(found))
            after = None
            if len(found) >= limit:
                break
        return found

    async def retry_job(self, job_id: str) -> Job:
        """Run a job again now, whatever its back-off said; answers the job as it was."""
        kind, _, target = job_id.partition(":")
        job = await self._work.job(_kind(kind), target)
        if job is None:
            raise NotFound("job waiting (it may be done)")
        now = self._clock.now()
        # A key of its own: the queue may still hold (or remember) the job's last run.
        again = f"{job.id}:again:{now.timestamp()}"
        if job.kind == "summarize":
            if not await self._work.reopen_chunk(int(job.target), now, ready_too=False):
                raise Busy("a worker is summarising this chunk now")
            await self._enqueue(SUMMARIZE, job.target, key=again)
        elif job.kind == "extract":
            await self._enqueue(EXTRACT, job.target, key=again)
        else:
            await self._work.reopen_tidy(uuid.UUID(job.target))
            await self._enqueue(TIDY, job.target, key=again)
        return job

    async def failed_deliveries(self, *, after_id: int, limit: int) -> list[StoredMessage]:
        """Replies the platform would not take after every retry, by id."""
        return await self._messages.failed_deliveries(after_id=after_id, limit=limit)

    async def retry_delivery(self, message_id: int) -> StoredMessage:
        """Send a failed reply again, from its first part the platform did not take."""
        message = await self._outbox.retry(message_id)
        if message is None:
            raise NotFound("failed delivery")
        return message


def _kind(name: str) -> Kind:
    for kind in KINDS:
        if kind == name:
            return kind
    raise NotFound("job")
