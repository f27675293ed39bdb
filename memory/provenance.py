r"""Labels for input nobody typed, and escaping of typed text that imitates them.

Every line the gateway writes for a model to say who said something or where it came
from is a bracketed line: the headers above a message the person did not type
(`[source: operator via REST]`, `[from: Ann]`, `[time: 2026-07-01 12:00]`), a
transcript's header above each message (`[2026-07-01 12:00 · telegram · assistant]`),
a recall answer's (`[source: archive]`, `[#15 · 2026-07-01 12:00 · telegram · user Ann]`),
and those above the parts a summariser combines (`[part 2]`, `[2026-07-01 – 2026-07-09]`).
So one rule keeps typed text from passing for any of them, wherever a model reads it
(`escape_typed`, applied by `label`, the transcript and recall):

    A typed line whose first visible character is a left square bracket gets a
    backslash just before that character, and before any backslashes already there.

- A line is what `str.splitlines` cuts: after `\n`, `\r`, `\r\n`, VT, FF, U+001C–U+001E,
  NEL (U+0085), U+2028 or U+2029 — every break some reader takes for one.
- Its first visible character is the first that is none of: whitespace, a control or
  format character (Cc, Cf: zero-width space and joiners, BOM, word joiner, soft hyphen,
  bidi controls, tags), a combining mark, a Hangul filler, a braille blank, nor a
  character that NFKC turns into only such characters.
- A left square bracket is `[`, a character NFKC folds into it (fullwidth `［`, the
  vertical form `﹇`), or another that Unicode names a left square bracket (`⁅ ⎡ ⎢ ⎣ ⟦ ⦋
  ⦍ ⦏ ⹕ ⹗ 〚`); a backslash is `\` or what NFKC folds into it (`＼`, `﹨`).

Nothing else changes: the text keeps its own line breaks and format characters (an
emoji's zero-width joiner, a bidi mark), so what the model reads is what was typed plus
a backslash where one is needed, and dropping that backslash gives back what was typed.
The stored text is never touched: escaping happens where text is shown to a model.
A value the gateway writes inside one of its own lines (a name, a source) is made one
line that cannot close the bracket early (`header_value`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memory.storage.search import LeftOut

if TYPE_CHECKING:
    from memory.storage.messages import StoredMessage

HEADER_KEYS = ("source", "from", "time")

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


NOTICE_SOURCE = "gateway notice"
COMMAND_SOURCE = "gateway command"
# What the gateway says to the person (notices, command answers): not dialogue.
GATEWAY_SOURCES = frozenset({NOTICE_SOURCE, COMMAND_SOURCE})


# What `dialogue` leaves out, as a search leaves it out.
NOT_DIALOGUE = LeftOut(sources=GATEWAY_SOURCES, answered_by=frozenset({COMMAND_SOURCE}))


# A reminder or follow-up coming due: `reminder set by the person on Tue 1 Dec 2026`.
FIRING_SOURCE = "reminder set by"


def is_firing(source: str | None) -> bool:
    """The message is a reminder or follow-up coming due (a turn's trigger, not typed)."""
    return source is not None and source.startswith(FIRING_SOURCE)


def from_gateway(source: str | None) -> bool:
    """Said by the gateway to the person (notices, command answers), not dialogue."""
    return source in GATEWAY_SOURCES


def dialogue(messages: Sequence[StoredMessage]) -> list[StoredMessage]:
    """What a model may read of `messages`: everything but chat commands and what the
    gateway said (command answers, notices). Those stay in the verbatim record."""
    commands = {m.reply_to_seq for m in messages if m.source == COMMAND_SOURCE}
    return [m for m in messages if not from_gateway(m.source) and m.seq not in commands]


def escape_typed(text: str) -> str:
    """`text` with a backslash before every line that could pass for one the gateway
    writes (the rule in the module docstring)."""
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


def header(key: str, value: str) -> str:
    return f"[{key}: {header_value(value)}]"


def label(
    text: str, *, source: str | None = None, speaker: str | None = None, time: str | None = None
) -> str:
    """The text as the model sees it: gateway headers first, then the escaped body."""
    lines = []
    if source:
        lines.append(header("source", source))
    if speaker:
        lines.append(header("from", speaker))
    if time:
        lines.append(header("time", time))
    lines.append(escape_typed(text))
    return "\n".join(lines)
