"""Which text can be stored as it is, and what a platform's text must be stored as.

The rules are the ones `gateway/text.py` documents: our APIs refuse NUL characters,
lone surrogates and Unicode non-characters; platform text has NUL dropped and the
others replaced by U+FFFD. They are stated again here, a code point at a time, instead
of calling `gateway.text.clean` and `unstorable_reason`: an expectation computed by
the code under test would agree with any bug in it.
"""

from __future__ import annotations

import json

NUL = "\x00"
REPLACEMENT = "\ufffd"


def _replaced(character: str) -> bool:
    """A surrogate (none is left paired once read) or a non-character (U+FDD0–U+FDEF
    and the last two code points of every plane)."""
    code = ord(character)
    return 0xD800 <= code <= 0xDFFF or 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE


def storable(text: str) -> bool:
    """Text our APIs take as it is: no NUL, no lone surrogate, no non-character."""
    return NUL not in text and not any(_replaced(c) for c in text)


def as_received(text: str) -> str:
    """`text` as a JSON reader gets it when sent as JSON (escaped surrogate pairs join)."""
    received: str = json.loads(json.dumps(text))
    return received


def clean(text: str) -> str:
    """What platform text sent as JSON must be stored as."""
    # NUL goes first: the halves of a surrogate pair it kept apart then join.
    received = as_received(text.replace(NUL, ""))
    return "".join(REPLACEMENT if _replaced(c) else c for c in received)
