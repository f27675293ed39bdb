"""A person's profile as an operator keeps it: read as numbered lines, edited against
a revision, with its change log and retired facts. A person not there is
`PersonNotFound`; a stale revision or a bad edit is the profile's own error."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from gateway.clock import Clock
from gateway.errors import PersonNotFound
from memory.profile.facts import ChangeView, Edit, ProfileView, RetiredView
from memory.profile.profiles import BY_OPERATOR, Profiles
from memory.storage.directory import Directory


class PersonProfiles:
    def __init__(self, *, directory: Directory, profiles: Profiles, clock: Clock) -> None:
        self._directory = directory
        self._profiles = profiles
        self._clock = clock

    async def get(self, user_id: uuid.UUID) -> ProfileView:
        if await self._directory.person(user_id) is None:
            raise PersonNotFound()
        return await self._profiles.get(user_id)

    async def edit(self, user_id: uuid.UUID, revision: int, edits: Sequence[Edit]) -> ProfileView:
        """An operator's edits, made against `revision`: `StaleRevision` if it moved on,
        `EditError` for an edit that does not fit the lines."""
        await self.get(user_id)
        return await self._profiles.edit(
            user_id, revision, edits, self._clock.now(), by=BY_OPERATOR
        )

    async def retired(
        self, user_id: uuid.UUID, *, after_id: int, limit: int
    ) -> list[tuple[int, RetiredView]]:
        """Lines tidying or an edit took out, word for word, oldest first."""
        await self.get(user_id)
        return await self._profiles.retired_page(user_id, after_id=after_id, limit=limit)

    async def changes(self, user_id: uuid.UUID, *, before_id: int, limit: int) -> list[ChangeView]:
        """Who changed the profile and how, newest first."""
        await self.get(user_id)
        return await self._profiles.changes(user_id, before_id=before_id, limit=limit)
