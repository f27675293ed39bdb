"""What one model call took, in tokens, as the server counted them.

Apart from the rest of `memory` so a model provider can report it without loading
storage, and storage can sum it without knowing providers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Usage:
    prompt: int  # every prompt token, the cached ones included
    cached: int  # of those, read from the server's prompt cache
    completion: int
    model: str = ""  # the model asked (the stream names it; a decoder cannot)


def total(usage: tuple[Usage, ...] | list[Usage]) -> Usage:
    """The sum of several calls' usage (the model of the last)."""
    return Usage(
        prompt=sum(u.prompt for u in usage),
        cached=sum(u.cached for u in usage),
        completion=sum(u.completion for u in usage),
        model=usage[-1].model if usage else "",
    )
