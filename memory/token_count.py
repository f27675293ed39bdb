"""Token counting in one place.

The default is a fast estimate (about four characters a token for English, and at
least one token per non-ASCII character group), which errs on the high side so
prompts stay under the model's window. A real tokenizer can be plugged in as any
`TokenCounter`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def shorten(text: str, tokens: int, ellipsis: str = "…") -> str:
    """`text` if it fits `tokens`, else its longest start that does with `ellipsis`
    after it, cut after a whole word where there is one (the ellipsis included); ""
    if not even that fits."""
    if estimate_tokens(text) <= tokens:
        return text
    # The estimate only grows as text does: the longest fitting start, by halving.
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(text[:middle] + ellipsis) <= tokens:
            low = middle
        else:
            high = middle - 1
    start = text[:low]
    if low < len(text) and not text[low].isspace():
        words = start.rsplit(maxsplit=1)
        start = words[0] if len(words) > 1 else start
    start = start.rstrip()
    return f"{start}{ellipsis}" if start else ""


def shares(sizes: Sequence[int], budget: int) -> list[int]:
    """Tokens each of `sizes` may use of `budget`: the smallest first, each at most an
    equal part of what is left, so none gets more than it needs or less than its due."""
    given = [0] * len(sizes)
    left = max(0, budget)
    for done, i in enumerate(sorted(range(len(sizes)), key=lambda i: sizes[i])):
        given[i] = min(sizes[i], left // (len(sizes) - done))
        left -= given[i]
    return given
