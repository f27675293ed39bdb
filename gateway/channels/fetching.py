"""Files a platform holds for a message, fetched after the message is stored (DESIGN
§11): never inside the platform's webhook request, so its acknowledgement never waits
for a download.

Each file is fetched by its message's connector, retried with backoff while the
platform says "later", read for what it is off the event loop, and kept with its
message's line telling of it, in one transaction. A process that dies mid-fetch leaves
the file fetching; the sweep (one replica at a time) fetches what has been left so for
longer than a fetch may take. A turn waits for its messages' files (`settled`), at most
PARLEY_MEDIA_WAIT_SECONDS, then answers with what it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Iterable, Sequence
from datetime import timedelta

import structlog

from gateway.backoff import full_jitter
from gateway.channels.port import Connector, FetchesFiles
from gateway.clock import Clock
from gateway.errors import FileUnavailable, LLMError, MediaRefused
from gateway.llm.transcribe import Transcriber
from gateway.media.documents import document_text
from gateway.media.files import ReadFile, read_file
from gateway.metrics import Metrics
from memory.storage.attachments import Attachments, Fetched, FileToFetch
from memory.storage.messages import StoredMessage
from memory.storage.models import AttachmentKind, AttachmentState

log = structlog.get_logger(__name__)

ATTEMPTS = 5
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 30.0
# A file still fetching this long after its message was stored was left by a process
# that died (a live fetch gives up sooner: its attempts and their waits are bounded).
LEFT_AFTER = timedelta(minutes=3)
SWEEP_BATCH = 50
# How often a waiting turn looks again whether its files were kept (by any replica).
SETTLED_POLL_SECONDS = 0.2
# Files fetched and read at once in a process: each holds a file (up to 20 MB) several
# times over while it is read, so a burst of photos costs this many files' memory, not
# the burst's (bench.media_memory).
AT_ONCE = 2

_REFUSED = {
    "too_large": AttachmentState.TOO_LARGE,
    "unsupported": AttachmentState.UNSUPPORTED,
}


class Fetcher:
    def __init__(
        self,
        connectors: Iterable[Connector],
        attachments: Attachments,
        clock: Clock,
        *,
        max_bytes: int,
        metrics: Metrics,
        transcriber: Transcriber | None = None,
        backoff_base: float = BACKOFF_BASE_SECONDS,
    ) -> None:
        """`transcriber`: where voice notes and audio are transcribed (None: nowhere)."""
        self._transcriber = transcriber
        self._sources = {c.channel: c for c in connectors if isinstance(c, FetchesFiles)}
        self._attachments = attachments
        self._clock = clock
        self._max_bytes = max_bytes
        self._metrics = metrics
        self._backoff_base = backoff_base
        self._tasks: set[asyncio.Task[None]] = set()
        # Files being fetched in this process, so the sweep does not start them twice.
        self._fetching: set[int] = set()
        self._kept = asyncio.Condition()
        self._slots = asyncio.Semaphore(AT_ONCE)

    def fetch(self, message: StoredMessage) -> None:
        """Fetch the message's files, beside whatever called (a webhook's handler)."""
        task = asyncio.create_task(self._fetch_message(message.id), name=f"fetch:{message.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def sweep(self) -> int:
        """Fetch the files a process left fetching; how many were started."""
        left = await self._attachments.left_fetching(self._clock.now() - LEFT_AFTER, SWEEP_BATCH)
        started = [i for i in left if i not in self._fetching]
        await asyncio.gather(*(self._fetch_one(i) for i in started))
        return len(started)

    async def settled(self, message_ids: Sequence[int]) -> None:
        """Until no file of these messages is still being fetched (bound it with a
        timeout)."""
        while await self._attachments.fetching_of(message_ids):
            # Kept here, the condition wakes the turn at once; kept by another replica
            # (or failed there), the next look finds it.
            async with self._kept:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kept.wait(), SETTLED_POLL_SECONDS)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._transcriber is not None:
            await self._transcriber.aclose()

    async def _fetch_message(self, message_id: int) -> None:
        for attachment_id in await self._attachments.fetching_of([message_id]):
            await self._fetch_one(attachment_id)

    async def _fetch_one(self, attachment_id: int) -> None:
        if attachment_id in self._fetching:
            return
        self._fetching.add(attachment_id)
        try:
            async with self._slots:
                file = await self._attachments.to_fetch(attachment_id)
                if file is None:
                    return  # kept already (another replica), or gone with its message
                result = await self._result(file)
                kept = await self._attachments.fetched(attachment_id, result)
            if kept:
                self._metrics.files_fetched.labels(file.channel, result.state.value).inc()
        except Exception:
            # The database, most likely: the file stays fetching and the sweep tries again.
            log.exception("fetching a file failed", attachment_id=attachment_id)
        finally:
            self._fetching.discard(attachment_id)
            async with self._kept:
                self._kept.notify_all()

    async def _result(self, file: FileToFetch) -> Fetched:
        source = self._sources.get(file.channel)
        if source is None:
            log.warning("no connector fetches this channel's files", channel=file.channel)
            return Fetched(AttachmentState.FAILED)
        try:
            data = await self._download(source, file)
            read, digest = await asyncio.to_thread(_read, data, file.mime)
        except MediaRefused as refused:
            return Fetched(_REFUSED.get(refused.reason, AttachmentState.FAILED))
        except FileUnavailable as exc:
            log.warning("a file could not be fetched", attachment_id=file.id, error=str(exc))
            return Fetched(AttachmentState.FAILED)
        if file.kind is AttachmentKind.IMAGE and read.kind != "image":
            # Said to be a photo, and not one: nothing a model is shown as an image.
            return Fetched(AttachmentState.UNSUPPORTED)
        if read.kind == "audio":
            text = await self._transcript(file, read)
        elif read.kind == "document":
            text = await asyncio.to_thread(document_text, read.mime, read.data)
        else:
            text = None
        return Fetched(
            AttachmentState.READY,
            AttachmentKind(read.kind),
            read.mime,
            read.data,
            read.width,
            read.height,
            text,
            digest,
        )

    async def _transcript(self, file: FileToFetch, read: ReadFile) -> str | None:
        """The words of a voice note or audio file; None where none were had (kept
        all the same, and told as not transcribed)."""
        if self._transcriber is None:
            return None
        name = file.file_name or f"voice.{read.mime.rpartition('/')[2] or 'ogg'}"
        try:
            return await self._transcriber.transcribe(read.data, read.mime, name) or None
        except LLMError as exc:
            log.warning("a voice note was not transcribed", attachment_id=file.id, error=str(exc))
            return None

    async def _download(self, source: FetchesFiles, file: FileToFetch) -> bytes:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await source.fetch_file(file.source_ref, self._max_bytes)
            except FileUnavailable as exc:
                if not exc.transient or attempt == ATTEMPTS:
                    raise
                await asyncio.sleep(full_jitter(attempt, self._backoff_base, BACKOFF_CAP_SECONDS))
        raise AssertionError("unreachable")


def _read(data: bytes, mime: str) -> tuple[ReadFile, str]:
    """The file as kept, and the SHA-256 of that: both CPU work of tens of milliseconds
    for 20 MB, done off the event loop."""
    read = read_file(data, mime)
    return read, hashlib.sha256(read.data).hexdigest()
