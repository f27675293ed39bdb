"""Which lines a reader would take for one the gateway writes, stated here again
instead of asking `memory.provenance`: an expectation computed by the code under test
would agree with any bug in it.

Every line the gateway writes for a model to say who said something or where it came
from opens with a square bracket (`[source: …]`, `[from: …]`, `[time: …]`, a
transcript's `[2026-07-01 12:00 · telegram · assistant]`, a recall answer's
`[#15 · …]`). A line passes for one when, read as a lenient reader reads it — cut where
`str.splitlines` cuts, NFKC-normalised, past whatever shows nothing (whitespace,
control and format characters, combining marks) — it opens with a left square bracket.
"""

from __future__ import annotations

import unicodedata
from typing import Any

# After NFKC: the fullwidth and vertical forms are `[` by then. The others are what
# Unicode names a left square bracket.
LEFT_SQUARE_BRACKETS = frozenset(
    "[\u2045\u23a1\u23a2\u23a3\u27e6\u298b\u298d\u298f\u2e55\u2e57\u301a"
)
_UNSEEN = frozenset({"Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"})


def passes_for_gateway_line(line: str) -> bool:
    for character in unicodedata.normalize("NFKC", line):
        if character.isspace() or unicodedata.category(character) in _UNSEEN:
            continue
        return character in LEFT_SQUARE_BRACKETS
    return False


def gateway_like(text: str) -> list[str]:
    """The lines of `text` that pass for one the gateway writes."""
    return [line for line in text.splitlines() if passes_for_gateway_line(line)]


def forged_lines_shown(typed: list[str], shown: str) -> list[str]:
    """The lines of `typed` texts that pass for the gateway's and that `shown` holds as
    they are, each as a line of its own: what a model would take for the gateway's."""
    forged = {line for text in typed for line in gateway_like(text)}
    return [line for line in shown.splitlines() if line in forged]


def prompt_text(request: dict[str, Any]) -> str:
    """Every message of a model request (the OpenAI wire format the fuzzed gateway
    speaks) as text, one after the other."""
    parts = []
    for message in request["messages"]:
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            parts += [str(part.get("text", "")) for part in content]
        else:
            parts.append(str(content))
    return "\n".join(parts)
