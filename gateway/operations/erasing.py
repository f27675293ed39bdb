"""Deleting a conversation and erasing a person, whoever asks: an operator (REST, the
dashboard) or the person (`/erase`). What goes is gone from under no running turn, and
whoever has it open live (the web chat) hears that it ended.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from gateway.clock import Clock
from gateway.errors import Busy, ConversationNotFound, PersonNotFound
from gateway.events.hub import Ended, Hub
from gateway.operations.linking import Linking
from memory.storage.directory import Directory
from memory.storage.erasure import DeletedCounts, ErasedCounts, Erasure

# Said to an operator (a person asking `/erase` hears the command's own answer).
BUSY = "a turn of this conversation is still running"


class Erasing:
    def __init__(
        self,
        *,
        erasure: Erasure,
        directory: Directory,
        linking: Linking,
        hub: Hub,
        clock: Clock,
        forget: Callable[[Iterable[uuid.UUID]], None],
    ) -> None:
        """`forget`: drop what this process keeps in memory of those conversations."""
        self._forget = forget
        self._erasure = erasure
        self._directory = directory
        self._linking = linking
        self._hub = hub
        self._clock = clock

    async def delete_conversation(
        self, conversation_id: uuid.UUID, *, notice: str
    ) -> DeletedCounts:
        """`Busy` if its turn would not let go in time."""
        try:
            async with self._linking.held([conversation_id]):
                counts = await self._erasure.delete_conversation(
                    conversation_id, now=self._clock.now()
                )
        except TimeoutError:
            raise Busy(BUSY) from None
        if counts is None:
            raise ConversationNotFound()
        self._forget([conversation_id])
        self._hub.publish(conversation_id, Ended(conversation_id, notice))
        return counts

    async def erase_person(
        self, user_id: uuid.UUID, *, notice: str, asking: uuid.UUID | None = None
    ) -> ErasedCounts:
        """`Busy` if a turn of theirs would not let go in time. `asking`: the
        conversation whose own turn asks (`/erase`), which holds it already."""
        found = await self._directory.person(user_id)
        if found is None:
            raise PersonNotFound()
        # In id order, so two erasures touching the same conversations never wait on
        # each other.
        held = sorted(c for c in found.conversations if c != asking)
        try:
            async with self._linking.held(held):
                counts = await self._erasure.erase_user(user_id)
        except TimeoutError:
            raise Busy(BUSY) from None
        if counts is None:
            raise PersonNotFound()
        self._forget(found.conversations)
        for conversation_id in found.conversations:
            self._hub.publish(conversation_id, Ended(conversation_id, notice))
        return counts
