"""A person's data carried out and back in: the export as NDJSON lines (for REST and
the person's own download link alike) and an export's import."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable

from gateway.clock import Clock
from gateway.errors import PersonNotFound
from memory.portable.export import Exports, NoSuchUser
from memory.portable.imports import Imports
from memory.portable.tables import ImportCounts


class Portability:
    def __init__(self, *, exports: Exports, imports: Imports, clock: Clock) -> None:
        self._exports = exports
        self._imports = imports
        self._clock = clock

    async def export(self, user_id: uuid.UUID) -> AsyncIterator[str]:
        """The person's lines, header first. The header is read here, so a person who
        is not there is `PersonNotFound` before anything is sent."""
        lines = self._exports.export_user(user_id, now=self._clock.now())
        try:
            header = await anext(lines)
        except NoSuchUser:
            raise PersonNotFound() from None
        return _after(header, lines)

    async def import_lines(self, lines: Iterable[str]) -> ImportCounts:
        """All or nothing: `ExportFormatError` for a file it cannot read,
        `ImportConflict` for one naming someone here it cannot be merged into."""
        return await self._imports.import_lines(lines, now=self._clock.now())


async def _after(first: str, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    yield first
    async for line in rest:
        yield line
