"""One archive chunk as an operator opens it (its children, summary and transcript),
and its summary written again on request."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.clock import Clock
from gateway.errors import Busy, NotFound
from memory.archive.archive import Archive
from memory.archive.reads import ChunkView
from memory.archive.upkeep import SUMMARIZE, Enqueue
from memory.storage.work import Work


@dataclass(frozen=True, slots=True)
class ChunkDetail:
    chunk: ChunkView
    children: list[ChunkView]  # the rows it summarises
    transcript: str | None  # verbatim, for level 0


class Chunks:
    def __init__(self, *, archive: Archive, work: Work, enqueue: Enqueue, clock: Clock) -> None:
        self._archive = archive
        self._work = work
        self._enqueue = enqueue
        self._clock = clock

    async def chunk(self, chunk_id: int) -> ChunkDetail:
        chunk = await self._archive.chunk(chunk_id)
        if chunk is None:
            raise NotFound("chunk")
        return ChunkDetail(
            chunk, await self._archive.children(chunk_id), await self._archive.transcript(chunk_id)
        )

    async def resummarize(self, chunk_id: int) -> ChunkDetail:
        """Queue a new summary; the old one shows until the new one is in. `Busy`
        while a worker holds the chunk."""
        now = self._clock.now()
        if not await self._work.reopen_chunk(chunk_id, now, ready_too=True):
            if await self._archive.chunk(chunk_id) is None:
                raise NotFound("chunk")
            raise Busy("a worker is summarising this chunk now; try again shortly")
        await self._enqueue(
            SUMMARIZE, str(chunk_id), key=f"{SUMMARIZE}:{chunk_id}:again:{now.timestamp()}"
        )
        return await self.chunk(chunk_id)
