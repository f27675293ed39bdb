"""The timeline the model sees: ready chunks standing in for the messages they archive,
each archived message covered exactly once."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.engine import Connection

from memory.archive.reads import ChunkView, chunk_view
from memory.storage.models import Chunk, ChunkStatus
from memory.storage.tables import CHUNKS

# Every turn reads the timeline: its statements are built once (`memory.storage.tables`).
# Everything a timeline row needs; never the transcript.
TIMELINE_COLUMNS = tuple(
    CHUNKS.c[column.key]
    for column in (
        Chunk.id,
        Chunk.conversation_id,
        Chunk.level,
        Chunk.seq_start,
        Chunk.seq_end,
        Chunk.time_start,
        Chunk.time_end,
        Chunk.summary,
        Chunk.status,
        Chunk.attempts,
        Chunk.last_error,
        Chunk.parent_id,
        Chunk.in_timeline,
    )
)
_ROOTS = select(*TIMELINE_COLUMNS).where(
    CHUNKS.c.conversation_id == bindparam("conversation_id"), CHUNKS.c.parent_id.is_(None)
)
_READY_CHILDREN = select(*TIMELINE_COLUMNS).where(
    CHUNKS.c.parent_id.in_(bindparam("parents", expanding=True)),
    or_(CHUNKS.c.status == ChunkStatus.READY, CHUNKS.c.summary.is_not(None)),
)


def timeline_roots(connection: Connection, conversation_id: uuid.UUID) -> list[Any]:
    # Unswapped and pending chunks are always roots, and each level keeps only a few:
    # the same cost for a thousand archived messages as for a million. Plain rows,
    # not ORM objects: this runs every turn.
    return list(connection.execute(_ROOTS, {"conversation_id": conversation_id}))


def visible_rows(
    connection: Connection, roots: list[Any], swapped: set[int] | None = None
) -> list[ChunkView]:
    """Ready rows in the timeline: roots, and the children of unfinished parents."""
    unfinished = [r.id for r in roots if not _summarised(r) and r.level > 0]
    children = (
        list(connection.execute(_READY_CHILDREN, {"parents": unfinished})) if unfinished else []
    )
    swapped = swapped or set()
    shown = [
        row
        for row in roots + children
        if _summarised(row) and (row.level > 0 or row.in_timeline or row.id in swapped)
    ]
    return [chunk_view(row) for row in sorted(shown, key=lambda r: r.seq_start)]


def _summarised(row: Any) -> bool:
    """Has a summary to show: ready, or being summarised again (an operator asked) and
    showing the old summary until the new one replaces it."""
    return row.status == ChunkStatus.READY or row.summary is not None
