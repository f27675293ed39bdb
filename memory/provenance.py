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

from collections.abc import Sequence
from typing import TYPE_CHECKING

from memory.escaping import escape_typed, header_value
from memory.storage.search import LeftOut

if TYPE_CHECKING:
    from memory.storage.messages import StoredMessage

HEADER_KEYS = ("source", "from", "time")

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
