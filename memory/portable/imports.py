"""Import: an export merged into this database, without duplicating anything.

It goes to a new person, or to the person here whose history the file shows it is
(`owner.py`: their identities and their conversation's first message; a file naming
someone here without that, or naming two people here, is refused). Nothing in the file
is used as a database key; rows are matched by natural keys:

- identity: (channel, external_id); a message's author is one of the person's, or none
  (never someone else's: tables.py);
- chunk: (conversation, level, seq_start), the archive's own unique key;
- message: (conversation, seq). A message already at that seq is this one if its role,
  time and text agree, and is skipped; else the file's is not imported (a conflict:
  the conversation went on differently here);
- profile line: its text, ignoring case (as the profile itself does); retired fact:
  (text, reason, time retired).

So importing a file twice changes nothing the second time, and export → erase →
import gives back the same seqs and byte-identical texts and transcripts (text here is
cleaned, which leaves clean text as it is). Imported messages count as answered, so an
import never starts a turn, and a reply that was never delivered is marked failed
rather than sent now (an operator can send it again). A message's source line is the
gateway's word: an imported one that had any says `imported` (`rows.IMPORTED_SOURCE`),
except the gateway's notices and command answers, whose label only keeps them out of
what a model reads.

Lines are read as they come and written a page at a time, all in one transaction: a
file refused at any line (or an import that fails) leaves nothing behind. Transcript
files are written once it is committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from datetime import datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.archive.transcript import transcript_path, write_transcript
from memory.portable import rows
from memory.portable.format import (
    ATTACHMENT,
    CHUNK,
    CONVERSATION,
    IDENTITY,
    MESSAGE,
    ORDER,
    PROFILE_LINE,
    RETIRED_FACT,
    SCHEDULE,
    ExportFormatError,
    Fields,
    check_header,
    parse,
)
from memory.portable.owner import ImportConflict
from memory.portable.rows import IMPORTED_SOURCE
from memory.portable.tables import ImportCounts, Tables, Tally
from memory.storage.models import Chunk

__all__ = [
    "IMPORTED_SOURCE",
    "ExportFormatError",
    "ImportConflict",
    "ImportCounts",
    "Imports",
    "Tally",
]

PAGE_SIZE = 500
# Transcripts are large: files are written from so many chunks read at a time.
FILES_PAGE = 20


class Imports:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        clean: Callable[[str], str],
        archive_dir: Path | None,
        page_size: int = PAGE_SIZE,
    ) -> None:
        """`clean` makes outside text storable (the gateway's rules: no NUL, no lone
        surrogates); `archive_dir` gets the transcript files of the chunks imported
        (None: none are written)."""
        self._sessions = sessions
        self._clean = clean
        self._archive_dir = archive_dir
        self._page = page_size

    async def import_lines(
        self, lines: AsyncIterable[str] | Iterable[str], *, now: datetime
    ) -> ImportCounts:
        """Import an export's lines (newlines optional), all or nothing:
        `ExportFormatError`, naming the line, for a newer version or anything that is
        not this format; `ImportConflict` for a file not shown to be the history of the
        person here it names."""
        async with self._sessions() as session:
            run = await self._read(session, lines, now)
            counts = await run.finish()
            await session.commit()
        if run.transcripts and self._archive_dir is not None:
            assert run.conversation_id is not None  # level-0 chunks are in one
            files = await self._transcript_files(run.conversation_id, run.transcripts)
            counts = dataclasses.replace(counts, transcript_files=files)
        return counts

    async def _read(
        self, session: AsyncSession, lines: AsyncIterable[str] | Iterable[str], now: datetime
    ) -> _Run:
        run: _Run | None = None
        number = 0
        async for raw in _each(lines):
            number += 1
            data = parse(raw, number)
            if data is None:
                continue
            fields = Fields(data, number, self._clean)
            if run is None:
                check_header(data, number)
                run = _Run(Tables(session, rows.person(fields), now), self._page)
                continue
            await run.record(fields)
        if run is None:
            raise ExportFormatError(max(number, 1), "no header: this is not an export")
        return run

    async def _transcript_files(self, conversation_id: uuid.UUID, chunk_ids: list[int]) -> int:
        """The transcript files of the chunks imported, read back a page at a time (a
        chunk erased meanwhile gets none)."""
        assert self._archive_dir is not None
        written = 0
        for start in range(0, len(chunk_ids), FILES_PAGE):
            page = chunk_ids[start : start + FILES_PAGE]
            async with self._sessions() as session:
                found = (
                    await session.execute(
                        select(Chunk.id, Chunk.time_start, Chunk.transcript).where(
                            Chunk.id.in_(page)
                        )
                    )
                ).all()
            chunks = [(row[0], row[1], row[2] or "") for row in found]
            written += await asyncio.to_thread(
                _write_files, self._archive_dir, conversation_id, chunks
            )
        return written


class _Run:
    """One import: where it has got to in the file, and what it has matched so far."""

    def __init__(self, tables: Tables, page: int) -> None:
        self._tables = tables
        self._page = page
        self._stage = 0  # index in ORDER of the records being read
        self._identities: list[rows.IdentityRow] = []
        self._conversation: rows.ConversationRow | None = None
        self._chunks: list[rows.ChunkRow] = []
        self._messages: list[rows.MessageRow] = []
        self._profile: list[rows.Fact] = []
        self._retired: list[rows.Fact] = []
        self._schedules: list[rows.ScheduleRow] = []
        # Level-0 chunks imported with a transcript: their files are to be written.
        self.transcripts: list[int] = []

    @property
    def conversation_id(self) -> uuid.UUID | None:
        return self._tables.conversation_id

    async def record(self, fields: Fields) -> None:
        kind = fields.data.get("type")
        if kind not in ORDER:
            raise fields.error(f"unknown record type {kind!r}")
        position = ORDER.index(kind)
        if position < self._stage:
            raise fields.error(f"a {kind} record after {ORDER[self._stage]} records")
        await self._advance(position)
        if kind in (CHUNK, MESSAGE, ATTACHMENT) and self._tables.conversation_id is None:
            raise fields.error(f"a {kind} record before the conversation")
        if kind == IDENTITY:
            self._identities.append(rows.identity(fields))
        elif kind == CONVERSATION:
            if self._conversation is not None:
                raise fields.error("a second conversation")
            self._conversation = rows.conversation(fields)
            await self._tables.settle(self._identities, self._conversation)
        elif kind == CHUNK:
            self._chunks.append(rows.chunk(fields))
            if len(self._chunks) >= max(1, self._page // 10):
                await self._flush_chunks()
        elif kind == MESSAGE:
            self._messages.append(rows.message(fields))
            if len(self._messages) >= self._page:
                await self._tables.messages(self._messages)
                self._messages.clear()
        elif kind == ATTACHMENT:
            # Each on its own: a file may be 20 MB, and only one is held at a time.
            await self._tables.attachment(rows.attachment(fields))
        elif kind == PROFILE_LINE:
            self._profile.append(rows.profile_line(fields))
        elif kind == SCHEDULE:
            if self._tables.conversation_id is None:
                raise fields.error("a schedule record without the conversation")
            self._schedules.append(rows.schedule(fields))
        else:
            self._retired.append(rows.retired_fact(fields))
            if len(self._retired) >= self._page:
                await self._tables.retired(self._retired)
                self._retired.clear()

    async def finish(self) -> ImportCounts:
        await self._advance(len(ORDER))
        return self._tables.counts()

    async def _advance(self, position: int) -> None:
        """Finish the record types before `position`: none of them comes again."""
        while self._stage < position:
            kind = ORDER[self._stage]
            self._stage += 1
            if kind == CONVERSATION and not self._tables.settled:  # a person without one
                await self._tables.settle(self._identities, None)
            elif kind == CHUNK:
                await self._flush_chunks()
            elif kind == MESSAGE:
                await self._tables.messages(self._messages)
                self._messages.clear()
                await self._tables.bookkeeping(self._conversation)
            elif kind == PROFILE_LINE:
                await self._tables.profile(self._profile)
            elif kind == RETIRED_FACT:
                await self._tables.retired(self._retired)
                self._retired.clear()
            elif kind == SCHEDULE:
                await self._tables.schedules(self._schedules)
                self._schedules.clear()

    async def _flush_chunks(self) -> None:
        self.transcripts += await self._tables.chunks(self._chunks)
        self._chunks.clear()


def _write_files(
    archive_dir: Path, conversation_id: uuid.UUID, chunks: list[tuple[int, datetime, str]]
) -> int:
    for chunk_id, time_start, transcript in chunks:
        write_transcript(
            transcript_path(archive_dir, conversation_id, chunk_id, time_start), transcript
        )
    return len(chunks)


async def _each(lines: AsyncIterable[str] | Iterable[str]) -> AsyncIterator[str]:
    if isinstance(lines, AsyncIterable):
        async for line in lines:
            yield line
    else:
        for line in lines:
            yield line
