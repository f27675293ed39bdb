"""Token counting in one place.

The default is a fast estimate (about four characters a token for English, and at
least one token per non-ASCII character group), which errs on the high side so
prompts stay under the model's window. A real tokenizer can be plugged in as any
`TokenCounter`.
"""

from __future__ import annotations

from collections.abc import Callable

TokenCounter = Callable[[str], int]

# Role markers and separators the provider adds around each message.
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    if text.isascii():
        return (len(text) + 3) // 4
    # Non-Latin scripts tokenise far denser than four characters a token.
    wide = sum(1 for ch in text if ord(ch) > 0x7F)
    return (len(text) - wide + 3) // 4 + wide


def message_tokens(text: str, counter: TokenCounter = estimate_tokens) -> int:
    return counter(text) + MESSAGE_OVERHEAD_TOKENS
