"""A person's profile: lasting facts, one per line, changed only by validated edits.

Lines are appended by extraction and changed by tidying, by the person (`/forget`) or
by an operator, always as edits against a revision: an edit based on an older revision
is refused rather than overwriting newer lines. Every line an edit removes, shortens or
replaces is first copied, word for word, to the append-only retired facts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.storage.profile_rows import RECUT_CHUNK

MAX_FACT_CHARS = 500


class EditError(ValueError):
    """An edit answer that cannot be applied; nothing of it is."""


class StaleRevision(Exception):
    """The profile changed since the revision an edit was based on."""

    def __init__(self, expected: int, current: int) -> None:
        self.expected, self.current = expected, current
        super().__init__(f"profile is at revision {current}, the edit was made for {expected}")


@dataclass(frozen=True, slots=True)
class Remove:
    lines: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Shorten:
    line: int
    text: str


@dataclass(frozen=True, slots=True)
class Replace:
    lines: tuple[int, ...]
    text: str


Edit = Remove | Shorten | Replace


@dataclass(frozen=True, slots=True)
class Evidence:
    """Typed messages a fact was taken from: their seqs in the chunk's conversation."""

    chunk_id: int
    seqs: tuple[int, ...]
    # When the newest of them was sent.
    at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"chunk": self.chunk_id, "seqs": list(self.seqs), "at": self.at.isoformat()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Evidence:
        return cls(int(data["chunk"]), tuple(data["seqs"]), datetime.fromisoformat(data["at"]))

    def describe(self) -> str:
        seqs = ", ".join(str(seq) for seq in self.seqs)
        said = f"message {seqs} of {self.at:%Y-%m-%d}"
        return f"{said} (archive chunk {self.chunk_id})" if self.chunk_id != RECUT_CHUNK else said


# Where a line came from; empty for lines older than evidence ("unknown").
Sources = tuple[Evidence, ...]


@dataclass(frozen=True, slots=True)
class Fact:
    text: str
    sources: Sources = ()


@dataclass(frozen=True, slots=True)
class ProfileView:
    user_id: uuid.UUID
    lines: tuple[str, ...]
    revision: int
    # Aligned with `lines`.
    sources: tuple[Sources, ...] = ()
    # Facts an extraction offered without a typed message to show for them.
    refused: int = 0

    @property
    def chars(self) -> int:
        return sum(len(line) + 1 for line in self.lines)

    @property
    def facts(self) -> list[Fact]:
        sources = self.sources or ((),) * len(self.lines)
        return [Fact(line, src) for line, src in zip(self.lines, sources, strict=True)]

    def numbered(self) -> str:
        return "\n".join(f"{n}. {line}" for n, line in enumerate(self.lines, 1))


@dataclass(frozen=True, slots=True)
class ChangeView:
    """One revision of a profile: who made it, when, and the lines that came and went."""

    id: int
    revision: int
    at: datetime
    by: str
    added: list[str]
    removed: list[str]


@dataclass(frozen=True, slots=True)
class RetiredView:
    text: str
    reason: str
    retired_at: datetime
    sources: Sources = ()


def clean_fact(text: str) -> str | None:
    """A fact as one tidy line, or None if there is nothing usable."""
    line = " ".join(text.split())
    if not line or len(line) > MAX_FACT_CHARS:
        return None
    return line


def apply_edits(
    facts: Sequence[Fact], edits: Sequence[Edit], *, shrink: bool
) -> tuple[list[Fact], list[tuple[Fact, str]]]:
    """The new lines and the (line, reason) pairs retired, or `EditError`.

    A shortened line must be shorter; with `shrink` (tidying, which must make the profile
    smaller) so must a line that replaces others, while an operator's replacement may be
    a longer, corrected text. Untouched lines come through as the very same facts,
    evidence and all; a shortened line keeps its evidence, a line that replaces several
    carries all of theirs.
    """
    lines = [fact.text for fact in facts]
    touched: dict[int, Edit] = {}
    for edit in edits:
        numbers = (edit.line,) if isinstance(edit, Shorten) else edit.lines
        if not numbers:
            raise EditError("an edit names no lines")
        for number in numbers:
            if not 1 <= number <= len(lines):
                raise EditError(f"line {number} does not exist (the profile has {len(lines)})")
            if number in touched:
                raise EditError(f"line {number} is edited twice")
            touched[number] = edit
        if isinstance(edit, Shorten | Replace):
            text = clean_fact(edit.text)
            if text is None or text != edit.text:
                raise EditError("a new line must be one non-empty line of text")
            before = sum(len(lines[n - 1]) for n in numbers)
            if (shrink or isinstance(edit, Shorten)) and len(text) >= before:
                hint = "" if shrink else " (replace the line to write a longer one)"
                raise EditError(f"the new text for line(s) {list(numbers)} is not shorter{hint}")
    kept: list[Fact] = []
    retired: list[tuple[Fact, str]] = []
    for number, fact in enumerate(facts, 1):
        change = touched.get(number)
        if change is None:
            kept.append(fact)
        elif isinstance(change, Remove):
            retired.append((fact, "removed"))
        elif isinstance(change, Shorten):
            retired.append((fact, "shortened"))
            kept.append(Fact(change.text, fact.sources))
        else:
            retired.append((fact, "replaced"))
            if number == min(change.lines):
                merged = (e for n in sorted(change.lines) for e in facts[n - 1].sources)
                kept.append(Fact(change.text, tuple(dict.fromkeys(merged))))
    return kept, retired
