"""Split a long reply into parts a platform accepts, at the most natural boundary.

A cut prefers, in turn, a paragraph break, a line break, the end of a sentence, and a
space, as long as that leaves the part at least half full; only a single unbroken run
longer than the limit is cut mid-word. Only the whitespace at a cut is dropped.

A cut inside a fenced code block closes the fence at the end of the part and opens it
again, with the same info string (the language), at the start of the next, so every
part renders as the reply would; the indentation of the code is kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

Measure = Callable[[str], int]

# Each boundary's group 1 is the whitespace dropped at the cut.
_BOUNDARIES = (
    re.compile(r"(\n\s*\n)"),
    re.compile(r"(\n)"),
    re.compile(r"[.!?…。][\"'”’»)\]]*(\s+)"),
    re.compile(r"(\s+)"),
)
# A CommonMark fence line: up to three spaces, three or more backticks or tildes, and an
# info string (none on a closing fence).
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n]*)$", re.MULTILINE)


def utf16_length(text: str) -> int:
    """Length as Telegram and WhatsApp count it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def split_text(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Parts of `text`, in order, each at most `limit` by `measure`, none empty."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    fences = [m.group(1) for m in _FENCE.finditer(text)]
    # Room kept in every part for a closing fence, if the text has code blocks at all.
    reserve = measure("\n" + max(fences, key=len)) if fences else 0
    parts: list[str] = []
    rest = text.strip()
    while rest:
        if measure(rest) <= limit:
            parts.append(rest)
            break
        # The reopened fence line at the start of `rest` (if any) stays whole.
        reopened = len(rest.split("\n", 1)[0]) + 1 if parts and _opens(rest) else 0
        budget = limit - reserve
        if budget < max(2, 2 * measure(rest[:reopened])):
            budget, reserve, reopened = limit, 0, 0  # too tight for fences: plain cuts
        window = max(_longest_prefix(rest, budget, measure), reopened + 1)
        # Inside code only a line break is a boundary, however early: a cut mid-line
        # would break the line in two.
        in_code = bool(reserve) and _open_fence(rest[:window]) is not None
        cut, resume = _cut(rest, window, reopened, lines_only=in_code)
        part = rest[:cut].rstrip()
        still_open = _open_fence(part) if reserve else None
        if (
            still_open is not None
            and part[still_open.start :].strip() == still_open.line  # nothing in the block
            and (before := part[: still_open.start].rstrip())
        ):
            # A block that would open with nothing in it starts the next part instead.
            parts.append(before)
            rest = rest[still_open.start :]
            continue
        if still_open is None:
            parts.append(part)
            rest = rest[resume:].lstrip()
        else:
            parts.append(f"{part}\n{still_open.marker}")
            rest = still_open.line + "\n" + rest[resume:].lstrip("\n")
    return parts


def close_fences(text: str) -> str:
    """`text` with a code block it leaves open closed at its end (a reply cut short
    while it is written renders as it will once whole)."""
    still_open = _open_fence(text)
    return text if still_open is None else f"{text}\n{still_open.marker}"


def _opens(text: str) -> bool:
    first = _FENCE.match(text)
    return first is not None and first.start() == 0


@dataclass(frozen=True, slots=True)
class _Fence:
    marker: str  # ``` or ~~~ (or longer)
    line: str  # the opening line, info string included
    start: int  # where it starts in the text


def _open_fence(text: str) -> _Fence | None:
    """The code block still open at the end of `text`, if any."""
    opened: _Fence | None = None
    for match in _FENCE.finditer(text):
        marker, info = match.group(1), match.group(2)
        if opened is None:
            opened = _Fence(marker, match.group(0).strip(), match.start())
        elif (
            marker[0] == opened.marker[0] and len(marker) >= len(opened.marker) and not info.strip()
        ):
            opened = None
    return opened


def _longest_prefix(text: str, limit: int, measure: Measure) -> int:
    """How many characters of `text` fit in `limit` (at least one)."""
    low, high = 1, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if measure(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    return low


def _cut(text: str, window: int, keep: int = 0, *, lines_only: bool = False) -> tuple[int, int]:
    """Where the part ends and where the next one starts; never within the first `keep`
    characters. With `lines_only`, at the last line break if there is one."""
    if lines_only:
        line_end = text.rfind("\n", keep + 1, window + 1)
        if line_end > keep:
            return line_end, line_end + 1
    for boundary in _BOUNDARIES:
        last = None
        for match in boundary.finditer(text, keep, window + 1):
            if match.start(1) > keep:
                last = match
        if last is not None and last.start(1) >= max(window // 2, keep + 1):
            return last.start(1), last.end(1)
    return window, window
