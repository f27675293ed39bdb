"""Labels for input nobody typed, and escaping of typed text that imitates them.

The gateway writes a header line such as `[source: operator via REST]` above every
message it did not receive as the person's own typing. Typed text cannot forge one:
any of its lines that starts like a header gets a leading backslash.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memory.storage.search import LeftOut

if TYPE_CHECKING:
    from memory.storage.messages import StoredMessage

HEADER_KEYS = ("source", "from", "time")
_LOOKS_LIKE_HEADER = re.compile(
    r"^(\s*)(\\*)(\[\s*(?:" + "|".join(HEADER_KEYS) + r")\s*:)", re.IGNORECASE | re.MULTILINE
)

NOTICE_SOURCE = "gateway notice"
COMMAND_SOURCE = "gateway command"
# What the gateway says to the person (notices, command answers): not dialogue.
GATEWAY_SOURCES = frozenset({NOTICE_SOURCE, COMMAND_SOURCE})


# What `dialogue` leaves out, as a search leaves it out.
NOT_DIALOGUE = LeftOut(sources=GATEWAY_SOURCES, answered_by=frozenset({COMMAND_SOURCE}))


def from_gateway(source: str | None) -> bool:
    """Said by the gateway to the person (notices, command answers), not dialogue."""
    return source in GATEWAY_SOURCES


def dialogue(messages: Sequence[StoredMessage]) -> list[StoredMessage]:
    """What a model may read of `messages`: everything but chat commands and what the
    gateway said (command answers, notices). Those stay in the verbatim record."""
    commands = {m.reply_to_seq for m in messages if m.source == COMMAND_SOURCE}
    return [m for m in messages if not from_gateway(m.source) and m.seq not in commands]


def escape_typed(text: str) -> str:
    """Neutralise lines of `text` that could pass for a gateway header."""
    return _LOOKS_LIKE_HEADER.sub(r"\1\\\2\3", text)


def header(key: str, value: str) -> str:
    # A header value must stay on one line and cannot close the bracket early.
    clean = " ".join(value.replace("]", ")").split())
    return f"[{key}: {clean}]"


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
