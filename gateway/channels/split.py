"""Split a long reply into parts a platform accepts, at the most natural boundary.

A cut prefers, in turn, a paragraph break, a line break, the end of a sentence, and a
space, as long as that leaves the part at least half full; only a single unbroken run
longer than the limit is cut mid-word. Only the whitespace at a cut is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Measure = Callable[[str], int]

# Each boundary's group 1 is the whitespace dropped at the cut.
_BOUNDARIES = (
    re.compile(r"(\n\s*\n)"),
    re.compile(r"(\n)"),
    re.compile(r"[.!?…。][\"'”’»)\]]*(\s+)"),
    re.compile(r"(\s+)"),
)


def utf16_length(text: str) -> int:
    """Length as Telegram and WhatsApp count it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def split_text(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Parts of `text`, in order, each at most `limit` by `measure`, none empty."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    parts: list[str] = []
    rest = text.strip()
    while rest:
        if measure(rest) <= limit:
            parts.append(rest)
            break
        window = _longest_prefix(rest, limit, measure)
        cut, resume = _cut(rest, window)
        parts.append(rest[:cut].rstrip())
        rest = rest[resume:].lstrip()
    return parts


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


def _cut(text: str, window: int) -> tuple[int, int]:
    """Where the part ends and where the next one starts."""
    for boundary in _BOUNDARIES:
        last = None
        for match in boundary.finditer(text, 0, window + 1):
            if match.start(1) > 0:
                last = match
        if last is not None and last.start(1) >= window // 2:
            return last.start(1), last.end(1)
    return window, window
