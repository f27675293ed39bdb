"""People: who they are on which channel, merging two into one, unlinking a channel."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from gateway.http.api.inputs import Input
from gateway.http.api.once import OnceDep
from gateway.http.api.sessions import IdentityOut
from gateway.http.deps import CursorsDep, PeopleDep
from gateway.http.paging import (
    CursorQuery,
    LimitQuery,
    Page,
    by_creation,
    created_after,
    scope,
)
from gateway.http.problems import responses
from gateway.operations.people import Someone
from gateway.text import StorableText
from memory.storage.directory import Need

router = APIRouter(tags=["people"])


class StateOut(BaseModel):
    """What may need an operator in the person's own conversation."""

    owes_reply: bool
    failed_deliveries: int
    archive_errors: int
    # An identity of theirs asked to be let in on a `pairing` channel (GET /pairing).
    pairing_pending: bool


class UserOut(BaseModel):
    id: uuid.UUID
    display_name: str
    timezone: str
    created_at: datetime
    identities: list[IdentityOut]
    conversations: list[uuid.UUID]
    # Tokens their turns may take a day; null: the deployment's
    # PARLEY_DAILY_TOKENS_PER_PERSON (which may be no limit).
    daily_tokens: int | None
    state: StateOut

    @classmethod
    def of(cls, someone: Someone) -> UserOut:
        person, state = someone.person, someone.state
        return cls(
            id=person.id,
            display_name=person.display_name,
            timezone=person.timezone,
            created_at=person.created_at,
            identities=[IdentityOut(**asdict(i)) for i in person.identities],
            conversations=list(person.conversations),
            daily_tokens=person.daily_tokens,
            state=StateOut(**asdict(state)),
        )


class MergeIn(Input):
    other_user_id: uuid.UUID = Field(
        description="the person who becomes part of this one",
        examples=["6f1c2e4a-8d3b-4f7e-9a21-0c5d8e7b3f10"],
    )


class UserPatch(Input):
    daily_tokens: int | None = Field(
        ge=0,
        le=10**12,
        description="tokens their turns may take a day, midnight to midnight in their "
        "zone; null: the deployment's PARLEY_DAILY_TOKENS_PER_PERSON",
        examples=[200_000],
    )


class Unlinked(BaseModel):
    identity_id: uuid.UUID
    user_id: uuid.UUID  # the person the identity belongs to now


UserPage = Page[UserOut]


@router.get("/users", responses=responses(422))
async def list_users(
    people: PeopleDep,
    cursors: CursorsDep,
    q: Annotated[StorableText | None, Query(max_length=200)] = None,
    needs: Annotated[
        Need | None,
        Query(
            description="only people whose conversation needs this (`pairing`: one of "
            "whose identities waits to be let in)"
        ),
    ] = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> UserPage:
    """People, newest first; `q` finds a name (theirs or one of their identities') or
    every word of something they said (messages and archived transcripts)."""
    key = scope("users", q=q, needs=needs)
    found = await people.page(
        q, needs=needs, after=created_after(cursors.read(key, cursor)), limit=limit + 1
    )
    shown, next_cursor = cursors.cut(key, found, limit, lambda s: by_creation(s.person))
    return UserPage(items=[UserOut.of(s) for s in shown], next_cursor=next_cursor)


@router.get("/users/{user_id}", responses=responses(404))
async def get_user(people: PeopleDep, user_id: uuid.UUID) -> UserOut:
    return UserOut.of(await people.someone(user_id))


@router.patch("/users/{user_id}", responses=responses(404, 422))
async def patch_user(people: PeopleDep, user_id: uuid.UUID, body: UserPatch) -> UserOut:
    """Set a person's own daily token cap: raise it to lift today's, or null to follow
    the deployment's again."""
    return UserOut.of(await people.set_daily_tokens(user_id, body.daily_tokens))


@router.post("/users/{user_id}/merge", response_model=UserOut, responses=responses(404, 409, 422))
async def merge_users(
    people: PeopleDep, once: OnceDep, user_id: uuid.UUID, body: MergeIn
) -> Response:
    """Make `other_user_id` part of this person, as `/link` does: every identity moves
    here and the two conversations become one, interleaved by arrival time (the
    archive of both is cut again from the merged history)."""

    async def merge() -> UserOut:
        return UserOut.of(await people.merge(user_id, body.other_user_id))

    return await once.run(merge, about=lambda user: user.id)


@router.delete("/identities/{identity_id}", responses=responses(404, 409))
async def unlink_identity(people: PeopleDep, identity_id: uuid.UUID) -> Unlinked:
    """Give a linked identity a person and a conversation of its own again; its
    history stays with the person it leaves."""
    return Unlinked(identity_id=identity_id, user_id=await people.unlink(identity_id))
