"""Linking people: their conversations rewritten into one while their turns are held.

A merge rewrites every conversation it touches, so nothing may answer in them
meanwhile: `held` holds their turns, on every replica, for as long as the rewrite runs.
An operator's merge of two people (REST, the dashboard) and a person's own `/link CODE`
(`gateway.commands.linking`) both go through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable

from gateway.clock import Clock
from gateway.turns.runner import TurnRunner
from memory.storage.linking import Links

# Two people linking into each other's conversation at the same moment would wait on
# each other forever; one of them is asked to try again instead.
GUARD_WAIT_SECONDS = 30.0


class Linking:
    def __init__(self, *, links: Links, runner: TurnRunner, clock: Clock) -> None:
        self._links = links
        self._runner = runner
        self._clock = clock

    @contextlib.asynccontextmanager
    async def held(self, conversations: Iterable[uuid.UUID]) -> AsyncIterator[None]:
        """The conversations' turns held, taken in the order given; `TimeoutError` if
        they are not all taken within `GUARD_WAIT_SECONDS`."""
        async with contextlib.AsyncExitStack() as held:
            async with asyncio.timeout(GUARD_WAIT_SECONDS):
                for conversation_id in conversations:
                    await held.enter_async_context(self._runner.guard(conversation_id))
            yield

    async def merge(self, survivor_user: uuid.UUID, absorbed_user: uuid.UUID) -> bool:
        """An operator's merge of two people, their turns held meanwhile; `TimeoutError`
        if a turn would not let go in time."""
        # In id order, so two merges of the same pair never wait on each other.
        conversations = await self._links.personal_conversations(survivor_user, absorbed_user)
        async with self.held(conversations):
            merged = await self._links.merge_users(
                survivor_user, absorbed_user, now=self._clock.now()
            )
        # What either of them left unanswered is the merged conversation's to answer.
        for conversation_id in await self._links.personal_conversations(survivor_user):
            self._runner.request(conversation_id)
        return merged
