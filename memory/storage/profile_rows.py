"""How a profile is kept in its row: one fact per line of `text`, and in `evidence` a JSON
list, one entry per line, of where each came from (`{"chunk", "seqs", "at"}` objects,
memory.profile.Evidence). Read and written here only, so that a merge, which renumbers
seqs, can carry evidence along without knowing more of profiles; and every write is
recorded, with who made it, as a `ProfileChange`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from memory.storage.models import Profile, ProfileChange

# One line's evidence as stored: a list of `{"chunk", "seqs", "at"}` objects.
RawSources = list[dict[str, Any]]

# An evidence's chunk once the archive it named was cut again (conversations merged).
RECUT_CHUNK = 0
BY_CHARS = 100  # ProfileChange.by's width


def lines_of(text: str) -> list[str]:
    """The facts of a profile's `text`."""
    return text.split("\n") if text else []


def read(row: Profile | None) -> list[tuple[str, RawSources]]:
    """Each line with its evidence; lines from before evidence was kept (or a column out
    of step) have none."""
    if row is None:
        return []
    stored = json.loads(row.evidence) if row.evidence else []
    return [
        (line, stored[n] if n < len(stored) else []) for n, line in enumerate(lines_of(row.text))
    ]


def write(
    session: AsyncSession,
    row: Profile,
    lines: Sequence[tuple[str, RawSources]],
    now: datetime,
    *,
    by: str,
) -> None:
    """Store `lines` as a new revision, made `by` someone ("operator", "model: tidying")."""
    before = lines_of(row.text)
    row.text = "\n".join(line for line, _ in lines)
    row.evidence = json.dumps([sources for _, sources in lines])
    row.revision += 1
    row.updated_at = now
    after = lines_of(row.text)
    was, now_is = set(before), set(after)
    session.add(
        ProfileChange(
            user_id=row.user_id,
            revision=row.revision,
            at=now,
            by=by[:BY_CHARS],
            added=json.dumps([line for line in after if line not in was]),
            removed=json.dumps([line for line in before if line not in now_is]),
        )
    )


def renumbered(sources: RawSources, seqs: Mapping[int, int]) -> RawSources:
    """`sources` after a merge renumbered their messages (`seqs`: old seq -> new); seqs
    no longer there (erased) are dropped, and so is evidence left with none."""
    carried = []
    for source in sources:
        kept = [seqs[seq] for seq in source["seqs"] if seq in seqs]
        if kept:
            carried.append(source | {"chunk": RECUT_CHUNK, "seqs": kept})
    return carried
