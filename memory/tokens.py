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
    # Non-Latin scripts tokenise far denser than four characters a token. Counting them
    # through an encode keeps this in C: a prompt is hundreds of thousands of characters.
    narrow = len(text.encode("ascii", "ignore"))
    return (narrow + 3) // 4 + len(text) - narrow


def message_tokens(text: str, counter: TokenCounter = estimate_tokens) -> int:
    return counter(text) + MESSAGE_OVERHEAD_TOKENS
