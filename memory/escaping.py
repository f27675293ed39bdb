r"""Escaping of text nobody at the gateway wrote, wherever a model reads it beside the
gateway's own bracketed lines (the rule is `memory.provenance`'s, which labels messages
with it; files' words use it too, from storage, which sits below provenance).
"""

from __future__ import annotations

import unicodedata

# What Unicode names a left square bracket, beside `[` and what NFKC folds into it.
_LEFT_SQUARE_BRACKETS = frozenset(
    "\u2045\u23a1\u23a2\u23a3\u27e6\u298b\u298d\u298f\u2e55\u2e57\u301a"
)
# Characters that show nothing where a line starts: separators, controls, format
# characters, combining marks; and the few letters and symbols drawn blank.
_UNSEEN_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Me"})
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# A header value's own closing brackets, and what NFKC folds into one.
_CLOSERS = str.maketrans(dict.fromkeys("]\uff3d\ufe48", ")"))


def escape_typed(text: str) -> str:
    """`text` with a backslash before every line that could pass for one the gateway
    writes (the rule in `memory.provenance`'s docstring)."""
    return "".join(_escaped(line) for line in text.splitlines(keepends=True))


def _escaped(line: str) -> str:
    start = 0
    while start < len(line) and _unseen(line[start]):
        start += 1
    end = start
    while end < len(line) and (_unseen(line[end]) or _folds_to(line[end], "\\")):
        end += 1
    if end < len(line) and _left_bracket(line[end]):
        return f"{line[:start]}\\{line[start:]}"
    return line


def _unseen(character: str) -> bool:
    return all(
        c.isspace() or c in _BLANK or unicodedata.category(c) in _UNSEEN_CATEGORIES
        for c in unicodedata.normalize("NFKC", character)
    )


def _folds_to(character: str, ascii_character: str) -> bool:
    return unicodedata.normalize("NFKC", character) == ascii_character


def _left_bracket(character: str) -> bool:
    return character in _LEFT_SQUARE_BRACKETS or _folds_to(character, "[")


def header_value(value: str) -> str:
    """`value` fit for a bracketed line the gateway writes: on one line (every line
    break and run of whitespace a space), with no `]` to close the bracket early."""
    return " ".join(value.translate(_CLOSERS).split())
