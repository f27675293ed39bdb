"""One-time codes people read off one screen and type into another."""

from __future__ import annotations

import secrets

# No 0/O or 1/I/L: codes are read off one screen and typed into another.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(text: str) -> str:
    """What a person typed, as a code: case, spaces and dashes do not matter."""
    return "".join(text.split()).replace("-", "").upper()
