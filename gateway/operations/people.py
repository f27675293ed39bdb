"""People as an operator sees them: the directory (found by name or by something they
said), what waits on an operator in their conversation, merging two into one and
giving a linked identity back its own person."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.clock import Clock
from gateway.errors import Busy, Conflict, InputError, NotFound, PersonNotFound
from gateway.operations.linking import Linking
from memory.storage.directory import After, Directory, Need, PersonState, PersonView
from memory.storage.identities import Identities, UnlinkStatus
from memory.storage.search import Search

# Conversations a word search of people looks through (the most recently active).
SAID_IN = 500


@dataclass(frozen=True, slots=True)
class Someone:
    """A person with what may need an operator in their own conversation."""

    person: PersonView
    state: PersonState


class People:
    def __init__(
        self,
        *,
        directory: Directory,
        search: Search,
        identities: Identities,
        linking: Linking,
        clock: Clock,
    ) -> None:
        self._directory = directory
        self._search = search
        self._identities = identities
        self._linking = linking
        self._clock = clock

    async def page(
        self, q: str | None, *, needs: Need | None, after: After | None, limit: int
    ) -> list[Someone]:
        """Newest first; `q` finds a name (theirs or an identity's) or every word of
        something they said."""
        said_in = [] if not q else await self._search.conversations_with(q, limit=SAID_IN)
        people = await self._directory.people(
            q, after=after, limit=limit, said_in=said_in, needs=needs, now=self._clock.now()
        )
        return await self._with_states(people)

    async def person(self, user_id: uuid.UUID) -> PersonView:
        found = await self._directory.person(user_id)
        if found is None:
            raise PersonNotFound()
        return found

    async def set_daily_tokens(self, user_id: uuid.UUID, tokens: int | None) -> Someone:
        """Set the person's own daily token cap (None: the deployment's): a cap raised
        past what they spent today lets their next message be answered."""
        if not await self._directory.set_daily_tokens(user_id, tokens):
            raise PersonNotFound()
        return await self.someone(user_id)

    async def someone(self, user_id: uuid.UUID) -> Someone:
        return (await self._with_states([await self.person(user_id)]))[0]

    async def merge(self, survivor: uuid.UUID, absorbed: uuid.UUID) -> Someone:
        """`absorbed` becomes part of `survivor`, as `/link` does; `Busy` while a turn
        of one of them would not let go."""
        if survivor == absorbed:
            raise InputError("a person cannot be merged with themselves")
        await self.person(absorbed)
        await self.person(survivor)
        try:
            merged = await self._linking.merge(survivor, absorbed)
        except TimeoutError:
            raise Busy("a turn of one of them is still running; try again shortly") from None
        if not merged:
            raise PersonNotFound()
        return await self.someone(survivor)

    async def unlink(self, identity_id: uuid.UUID) -> uuid.UUID:
        """Give a linked identity a person and a conversation of its own again; answers
        that person."""
        try:
            status = await self._identities.unlink(identity_id, now=self._clock.now())
        except LookupError:
            raise NotFound("identity") from None
        if status is UnlinkStatus.ONLY_IDENTITY:
            raise Conflict("the person has no other identity: there is nothing to unlink")
        owner = await self._directory.identity_owner(identity_id)
        assert owner is not None  # the unlink just gave it one
        return owner

    async def _with_states(self, people: Sequence[PersonView]) -> list[Someone]:
        states = await self._directory.states([p.id for p in people], now=self._clock.now())
        return [Someone(p, states[p.id]) for p in people]
