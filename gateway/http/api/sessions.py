"""Conversations ("sessions"): find them, look inside, rename, delete."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response
from pydantic import BaseModel, Field, model_validator

from gateway.http.api.inputs import Input
from gateway.http.deps import CursorsDep, SessionsDep
from gateway.http.paging import (
    CursorQuery,
    LimitQuery,
    Page,
    by_creation,
    created_after,
    scope,
)
from gateway.http.problems import ApiError, responses
from gateway.operations.sessions import Sessions, SessionState
from gateway.text import StorableText
from memory.storage.conversations import ConversationView
from memory.storage.directory import SessionFilter
from memory.storage.models import ConversationKind
from memory.zones import known_zone

router = APIRouter(tags=["sessions"])


class SessionOut(BaseModel):
    id: uuid.UUID
    kind: Literal["personal", "group"]
    user_id: uuid.UUID | None
    title: str
    created_at: datetime
    last_message_at: datetime | None
    message_count: int
    owes_reply: bool

    @classmethod
    def of(cls, view: ConversationView) -> SessionOut:
        return cls(
            id=view.id,
            kind=view.kind.value,
            user_id=view.user_id,
            title=view.title,
            created_at=view.created_at,
            last_message_at=view.last_message_at,
            message_count=view.message_count,
            owes_reply=view.owes_reply,
        )


class IdentityOut(BaseModel):
    id: uuid.UUID
    channel: str
    external_id: str
    display_name: str
    created_at: datetime


class ChunkCount(BaseModel):
    level: int
    state: Literal["pending", "ready", "failed"]
    count: int


class ArchiveError(BaseModel):
    message: str
    at: datetime | None


class SessionDetail(SessionOut):
    timezone: str | None = Field(description="the person's; null for a group")
    identities: list[IdentityOut]
    live_tokens: int
    chunks: list[ChunkCount]
    pending_jobs: int
    last_archive_error: ArchiveError | None


class SessionPatch(Input):
    title: Annotated[StorableText, Field(max_length=200, examples=["Ada"])] | None = None
    timezone: Annotated[str, Field(max_length=64, examples=["Europe/Berlin"])] | None = None

    @model_validator(mode="after")
    def _something(self) -> SessionPatch:
        if self.title is None and self.timezone is None:
            raise ValueError("give `title`, `timezone` or both")
        return self


class Deleted(BaseModel):
    messages: int
    chunks: int
    transcripts: int
    transcript_files: int
    jobs: int
    deliveries: int


SessionPage = Page[SessionOut]


@router.get("/sessions", responses=responses(422))
async def list_sessions(
    sessions: SessionsDep,
    cursors: CursorsDep,
    channel: Annotated[str | None, Query(max_length=32)] = None,
    kind: Literal["personal", "group"] | None = None,
    user_id: uuid.UUID | None = None,
    q: Annotated[StorableText | None, Query(max_length=200)] = None,
    active_since: datetime | None = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> SessionPage:
    """Conversations, newest first."""
    where = SessionFilter(
        kind=None if kind is None else ConversationKind(kind),
        user_id=user_id,
        channel=channel,
        q=q,
        active_since=active_since,
    )
    key = scope("sessions", filter=repr(where))
    views = await sessions.page(
        where, after=created_after(cursors.read(key, cursor)), limit=limit + 1
    )
    shown, next_cursor = cursors.cut(key, views, limit, by_creation)
    return SessionPage(items=[SessionOut.of(v) for v in shown], next_cursor=next_cursor)


@router.get("/sessions/{session_id}", responses=responses(404))
async def get_session(
    sessions: SessionsDep, session_id: uuid.UUID, response: Response
) -> SessionDetail:
    """One conversation: its person, identities, archive state and pending work."""
    detail = await _session_detail(sessions, session_id)
    response.headers["ETag"] = _etag(detail)
    return detail


@router.patch("/sessions/{session_id}", responses=responses(404, 412, 422))
async def patch_session(
    sessions: SessionsDep,
    session_id: uuid.UUID,
    patch: SessionPatch,
    response: Response,
    if_match: Annotated[str | None, Header(max_length=200)] = None,
) -> SessionDetail:
    """Rename the conversation or set its person's time zone (a group has none).
    With `If-Match`, only if nobody changed it since that ETag."""
    if patch.timezone is not None and not known_zone(patch.timezone):
        raise ApiError(422, f"unknown time zone {patch.timezone!r}: use an IANA name")
    if if_match is not None and if_match != _etag(await _session_detail(sessions, session_id)):
        raise ApiError(412, "the session changed since that ETag: read it again")
    await sessions.rename(session_id, title=patch.title, timezone=patch.timezone)
    detail = await _session_detail(sessions, session_id)
    response.headers["ETag"] = _etag(detail)
    return detail


async def _session_detail(sessions: Sessions, session_id: uuid.UUID) -> SessionDetail:
    return _detail(await sessions.state(session_id))


def _detail(found: SessionState) -> SessionDetail:
    view, person, status = found.conversation, found.person, found.archive
    error = None
    if status.last_error is not None:
        error = ArchiveError(message=status.last_error, at=status.last_error_at)
    return SessionDetail(
        **SessionOut.of(view).model_dump(),
        timezone=None if person is None else person.timezone,
        identities=[] if person is None else [IdentityOut(**asdict(i)) for i in person.identities],
        live_tokens=status.live_tokens,
        chunks=[
            ChunkCount(level=level, state=state.value, count=count)
            for (level, state), count in sorted(status.chunks.items())
        ],
        pending_jobs=status.pending_work,
        last_archive_error=error,
    )


def _etag(detail: SessionDetail) -> str:
    edited = f"{detail.title}\0{detail.timezone}".encode()
    return '"' + hashlib.sha256(edited).hexdigest()[:20] + '"'
