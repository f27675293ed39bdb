"""Deleting a conversation and erasing a person; a person's export and its import.

Deletes and erasures hold the conversation's turns meanwhile (on every replica), so
no turn writes into what is being removed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from gateway.http.api.once import OnceDep
from gateway.http.api.sessions import Deleted
from gateway.http.deps import ErasingDep, PortabilityDep
from gateway.http.problems import ApiError, responses
from gateway.operations.portability import Portability
from memory.portable.tables import ImportCounts

router = APIRouter(tags=["people"])

NDJSON = "application/x-ndjson"
# What a person still connected (the web chat) hears when an operator ends it.
DELETED_NOTICE = (
    "This conversation was deleted by the gateway's operator. If you write again, it "
    "starts from nothing."
)
ERASED_NOTICE = (
    "Everything kept of you here was erased by the gateway's operator. If you write "
    "again, we start from nothing."
)


class Erased(Deleted):
    identities: int
    profile_lines: int
    retired_facts: int


class Tally(BaseModel):
    created: int
    skipped: int


class Imported(BaseModel):
    user_id: uuid.UUID
    user_created: bool
    identities: Tally
    chunks: Tally
    messages: Tally
    profile_lines: Tally
    retired_facts: Tally
    schedules: Tally
    attachments: Tally
    transcript_files: int
    conflicts: int = 0

    @classmethod
    def of(cls, counts: ImportCounts) -> Imported:
        return cls.model_validate(counts, from_attributes=True)


@router.delete("/sessions/{session_id}", tags=["sessions"], responses=responses(404, 409))
async def delete_session(erasing: ErasingDep, session_id: uuid.UUID) -> Deleted:
    """Delete the conversation with its messages, archive (and transcript files),
    jobs and deliveries. A person's own conversation starts again empty; the person,
    their profile and their other channels stay."""
    counts = await erasing.delete_conversation(session_id, notice=DELETED_NOTICE)
    return Deleted.model_validate(counts, from_attributes=True)


@router.delete("/users/{user_id}", responses=responses(404, 409))
async def erase_user(erasing: ErasingDep, user_id: uuid.UUID) -> Erased:
    """Erase the person: every identity, their conversation, their messages wherever
    they wrote, the archive cut from them, profile and retired facts, queued jobs and
    deliveries, and transcript files. Nothing of theirs is left to restore."""
    counts = await erasing.erase_person(user_id, notice=ERASED_NOTICE)
    return Erased.model_validate(counts, from_attributes=True)


@router.get(
    "/users/{user_id}/export",
    response_class=StreamingResponse,
    responses={
        **responses(404),
        200: {"content": {NDJSON: {}}, "description": "one JSON object a line"},
    },
)
async def export_user(portability: PortabilityDep, user_id: uuid.UUID) -> StreamingResponse:
    """Everything of the person as NDJSON: a header (format version, counts), then
    identities, conversation, chunks with transcripts, messages, profile lines and
    retired facts. Streamed a page at a time."""
    return await export_response(portability, user_id)


@router.post(
    "/import",
    status_code=200,
    response_model=Imported,
    responses=responses(409, 413, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {NDJSON: {"schema": {"type": "string"}}},
        }
    },
)
async def import_export(portability: PortabilityDep, once: OnceDep, request: Request) -> Response:
    """Merge an export back, all or nothing (idempotent: what is here already is
    skipped). It goes to a new person, or to the person here whose history the file is
    (their identity and their conversation's first message): a file naming someone
    here without that, or naming two people here, is a 409. A newer format is refused.
    Larger than PARLEY_MAX_BODY_BYTES: use `parley import`."""
    if request.headers.get("content-type", "").split(";")[0].strip() != NDJSON:
        raise ApiError(415, f"send the export as {NDJSON}")

    async def load() -> Imported:
        text = (await request.body()).decode("utf-8", errors="replace")
        return Imported.of(await portability.import_lines(text.splitlines(keepends=True)))

    return await once.run(load, about=lambda counts: counts.user_id)


async def export_response(portability: Portability, user_id: uuid.UUID) -> StreamingResponse:
    """The person's export as a download (REST, and the person's own link)."""
    lines: AsyncIterator[str] = await portability.export(user_id)
    return StreamingResponse(
        lines,
        media_type=NDJSON,
        headers={"Content-Disposition": f'attachment; filename="parley-{user_id}.ndjson"'},
    )
