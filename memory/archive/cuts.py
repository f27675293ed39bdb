"""Where to cut the live window into archive chunks."""

from __future__ import annotations

from collections.abc import Sequence

from memory.archive.numbers import MemoryLimits
from memory.storage.messages import StoredMessage
from memory.storage.models import Role


def plan_cut(
    messages: Sequence[StoredMessage], answered_seq: int, limits: MemoryLimits
) -> list[list[StoredMessage]]:
    """Slices of the oldest unarchived messages to archive, oldest first.

    Cuts while what is left exceeds the live limit. Whole messages only; a slice never
    ends between a user message and the replies that follow it, and never takes a
    message that is still waiting for its reply.
    """
    remaining = sum(m.token_count for m in messages)
    slices: list[list[StoredMessage]] = []
    start = 0
    while remaining > limits.live_window_tokens:
        taken: list[StoredMessage] = []
        size = 0
        index = start
        while index < len(messages) and messages[index].seq <= answered_seq:
            message = messages[index]
            if size >= limits.chunk_tokens and message.role is Role.USER:
                break
            taken.append(message)
            size += message.token_count
            index += 1
        if size < limits.chunk_min_tokens:
            break
        slices.append(taken)
        remaining -= size
        start = index
    return slices
