"""What the assistant remembers of a conversation and a person: the archive's timeline
and chunks, the profile (edited by numbered line, guarded by its ETag) with its change
log, retired facts."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from gateway.http.api.inputs import Input
from gateway.http.api.once import OnceDep
from gateway.http.deps import ChunksDep, CursorsDep, ProfilesDep, SessionsDep
from gateway.http.paging import CursorQuery, LimitQuery, Page, scope
from gateway.http.problems import ApiError, responses
from gateway.operations.chunks import ChunkDetail
from gateway.text import MAX_INT64, StorableText
from memory.archive.reads import ChunkView
from memory.profile.facts import Edit, Evidence, Remove, Replace, Shorten
from memory.profile.facts import ProfileView as Profile

router = APIRouter(tags=["memory"])

ChunkId = Annotated[int, Path(ge=1, le=MAX_INT64)]
LineNumber = Annotated[int, Field(ge=1, le=100_000)]
FACT_CHARS = 2_000


class RowOut(BaseModel):
    id: int
    level: int = Field(description="0: a slice of messages; 1: consolidated; 2+: meta-summary")
    seq_start: int
    seq_end: int
    time_start: datetime
    time_end: datetime
    summary: str | None
    state: Literal["pending", "ready", "failed"]
    attempts: int
    last_error: str | None
    parent_id: int | None

    @classmethod
    def of(cls, chunk: ChunkView) -> RowOut:
        return cls(
            id=chunk.id,
            level=chunk.level,
            seq_start=chunk.seq_start,
            seq_end=chunk.seq_end,
            time_start=chunk.time_start,
            time_end=chunk.time_end,
            summary=chunk.summary,
            state=chunk.status.value,
            attempts=chunk.attempts,
            last_error=chunk.last_error,
            parent_id=chunk.parent_id,
        )


class Timeline(BaseModel):
    rows: list[RowOut]


class ChunkOut(RowOut):
    conversation_id: uuid.UUID
    children: list[RowOut]
    transcript: str | None = Field(description="verbatim, for level 0")


class EvidenceOut(BaseModel):
    chunk_id: int
    seqs: list[int]
    at: datetime

    @classmethod
    def of(cls, evidence: Evidence) -> EvidenceOut:
        return cls(chunk_id=evidence.chunk_id, seqs=list(evidence.seqs), at=evidence.at)


class LineOut(BaseModel):
    number: int
    text: str
    evidence: list[EvidenceOut] = Field(description="the typed messages it came from")


class ProfileOut(BaseModel):
    user_id: uuid.UUID
    revision: int
    lines: list[LineOut]

    @classmethod
    def of(cls, profile: Profile) -> ProfileOut:
        return cls(
            user_id=profile.user_id,
            revision=profile.revision,
            lines=[
                LineOut(number=n, text=f.text, evidence=[EvidenceOut.of(e) for e in f.sources])
                for n, f in enumerate(profile.facts, 1)
            ],
        )


class RemoveIn(Input):
    remove: list[LineNumber] = Field(min_length=1, max_length=1000)


class ShortenIn(Input):
    shorten: LineNumber
    to: Annotated[StorableText, Field(min_length=1, max_length=FACT_CHARS)]


class ReplaceIn(Input):
    replace: list[LineNumber] = Field(min_length=1, max_length=1000)
    with_: Annotated[StorableText, Field(alias="with", min_length=1, max_length=FACT_CHARS)]


class ProfileEdits(Input):
    """Edits by line number, in the tidying model's language; untouched lines stay byte
    for byte, and every removed, shortened or replaced line is kept in retired facts.
    A shortened line must be shorter; a replacement may be longer (a correction)."""

    edits: list[RemoveIn | ShortenIn | ReplaceIn] = Field(min_length=1, max_length=1000)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "edits": [
                        {"remove": [3]},
                        {"shorten": 1, "to": "Lives in Lyon"},
                        {"replace": [4, 5], "with": "Has two cats"},
                    ]
                }
            ]
        },
    )

    def parsed(self) -> list[Edit]:
        return [_edit(edit) for edit in self.edits]


class RetiredOut(BaseModel):
    id: int
    text: str
    reason: str
    retired_at: datetime
    evidence: list[EvidenceOut]


@router.get("/sessions/{session_id}/timeline", responses=responses(404))
async def timeline(sessions: SessionsDep, session_id: uuid.UUID) -> Timeline:
    """The archive rows the prompt shows now, oldest first; a row's `id` opens it."""
    return Timeline(rows=[RowOut.of(row) for row in await sessions.timeline(session_id)])


class LookupOut(BaseModel):
    id: int
    seq: int = Field(description="the last message the turn answered")
    tool: str
    arguments: str = Field(description="as the model wrote them (JSON, possibly invalid)")
    result: str = Field(description="what the model read back")
    created_at: datetime


LookupPage = Page[LookupOut]


@router.get("/sessions/{session_id}/lookups", responses=responses(404, 422))
async def lookups(
    sessions: SessionsDep,
    cursors: CursorsDep,
    session_id: uuid.UUID,
    limit: LimitQuery = 100,
    cursor: CursorQuery = None,
) -> LookupPage:
    """What the assistant looked up in its archive with its recall tools, newest first."""
    key = scope("lookups", session=str(session_id))
    before = cursors.read(key, cursor)
    rows = await sessions.lookups(
        session_id, before_id=None if before is None else int(before[0]), limit=limit + 1
    )
    shown, next_cursor = cursors.cut(key, rows, limit, lambda row: [row.id])
    return LookupPage(
        items=[LookupOut.model_validate(row, from_attributes=True) for row in shown],
        next_cursor=next_cursor,
    )


@router.get("/chunks/{chunk_id}", responses=responses(404))
async def get_chunk(chunks: ChunksDep, chunk_id: ChunkId) -> ChunkOut:
    """A chunk with its children (the rows it summarises), summary and transcript."""
    return _chunk_out(await chunks.chunk(chunk_id))


@router.post(
    "/chunks/{chunk_id}/resummarize",
    status_code=202,
    response_model=ChunkOut,
    responses=responses(404, 409),
)
async def resummarize(chunks: ChunksDep, once: OnceDep, chunk_id: ChunkId) -> Response:
    """Write the chunk's summary again; the old one shows until the new one is in."""

    async def reopen() -> ChunkOut:
        return _chunk_out(await chunks.resummarize(chunk_id))

    return await once.run(reopen, 202, about=lambda chunk: chunk.conversation_id)


@router.get("/users/{user_id}/profile", responses=responses(404))
async def get_profile(profiles: ProfilesDep, user_id: uuid.UUID, response: Response) -> ProfileOut:
    """The profile as numbered lines; its `ETag` goes in `If-Match` to edit it."""
    profile = await profiles.get(user_id)
    response.headers["ETag"] = _etag(profile.revision)
    return ProfileOut.of(profile)


@router.patch("/users/{user_id}/profile", responses=responses(404, 412, 422, 428))
async def edit_profile(
    profiles: ProfilesDep,
    user_id: uuid.UUID,
    body: ProfileEdits,
    response: Response,
    if_match: Annotated[str | None, Header(max_length=200)] = None,
) -> ProfileOut:
    """Apply edits made against the revision `If-Match` names (required)."""
    if if_match is None:
        raise ApiError(428, "send the profile's ETag in If-Match: edits are by line number")
    edited = await profiles.edit(user_id, _revision(if_match), body.parsed())
    response.headers["ETag"] = _etag(edited.revision)
    return ProfileOut.of(edited)


RetiredPage = Page[RetiredOut]


@router.get("/users/{user_id}/retired-facts", responses=responses(404, 422))
async def retired_facts(
    profiles: ProfilesDep,
    cursors: CursorsDep,
    user_id: uuid.UUID,
    limit: LimitQuery = 100,
    cursor: CursorQuery = None,
) -> RetiredPage:
    """Every line tidying or an edit removed or shortened, word for word, oldest first."""
    key = scope("retired", user=str(user_id))
    after = cursors.read(key, cursor)
    rows = await profiles.retired(
        user_id, after_id=0 if after is None else int(after[0]), limit=limit + 1
    )
    shown, next_cursor = cursors.cut(key, rows, limit, lambda row: [row[0]])
    return RetiredPage(
        items=[
            RetiredOut(
                id=fact_id,
                text=fact.text,
                reason=fact.reason,
                retired_at=fact.retired_at,
                evidence=[EvidenceOut.of(e) for e in fact.sources],
            )
            for fact_id, fact in shown
        ],
        next_cursor=next_cursor,
    )


class ChangeOut(BaseModel):
    id: int
    revision: int = Field(description="the revision the change made (the ETag's number)")
    at: datetime
    by: str = Field(
        description='who: "operator", "operator: merge", "operator: import", '
        '"person: /forget", "person: /link", "model: facts from archive #N", "model: tidying"'
    )
    added: list[str]
    removed: list[str]


ChangePage = Page[ChangeOut]


@router.get("/users/{user_id}/profile/changes", responses=responses(404, 422))
async def profile_changes(
    profiles: ProfilesDep,
    cursors: CursorsDep,
    user_id: uuid.UUID,
    limit: LimitQuery = 100,
    cursor: CursorQuery = None,
) -> ChangePage:
    """Who changed the profile, when, and the lines that came and went: newest first."""
    key = scope("profile-changes", user=str(user_id))
    before = cursors.read(key, cursor)
    rows = await profiles.changes(
        user_id, before_id=MAX_INT64 if before is None else int(before[0]), limit=limit + 1
    )
    shown, next_cursor = cursors.cut(key, rows, limit, lambda change: [change.id])
    return ChangePage(
        items=[ChangeOut.model_validate(c, from_attributes=True) for c in shown],
        next_cursor=next_cursor,
    )


def _chunk_out(detail: ChunkDetail) -> ChunkOut:
    return ChunkOut(
        **RowOut.of(detail.chunk).model_dump(),
        conversation_id=detail.chunk.conversation_id,
        children=[RowOut.of(c) for c in detail.children],
        transcript=detail.transcript,
    )


def _etag(revision: int) -> str:
    return f'"profile-{revision}"'


def _revision(if_match: str) -> int:
    tag = if_match.strip().removeprefix("W/")
    number = tag.strip('"').removeprefix("profile-")
    if not number.isdigit() or len(number) > 9:
        raise ApiError(412, "that is not an ETag of this profile: read it again")
    return int(number)


def _edit(edit: RemoveIn | ShortenIn | ReplaceIn) -> Edit:
    if isinstance(edit, RemoveIn):
        return Remove(tuple(edit.remove))
    if isinstance(edit, ShortenIn):
        return Shorten(edit.shorten, edit.to)
    return Replace(tuple(edit.replace), edit.with_)
