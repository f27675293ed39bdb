"""Work that waits on an operator: pairing requests, memory jobs, failed deliveries."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel

from gateway.http.api.messages import OperatorMessage
from gateway.http.api.once import OnceDep
from gateway.http.deps import CursorsDep, PairingsDep, RetriesDep
from gateway.http.paging import CursorQuery, LimitQuery, Page, scope
from gateway.http.problems import responses
from gateway.text import MAX_INT64
from memory.storage.pairing import Pairing
from memory.storage.work import KINDS, Job

router = APIRouter(tags=["operations"])

Code = Annotated[str, Path(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9-]+$")]
JobId = Annotated[
    str,
    Path(
        max_length=80,
        pattern=r"^(summarize|extract):[1-9][0-9]{0,17}$|^tidy:[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$",
        examples=["summarize:12"],
    ),
]


class PairingOut(BaseModel):
    code: str
    channel: str
    external_id: str
    display_name: str
    created_at: datetime
    expires_at: datetime
    approved_at: datetime | None

    @classmethod
    def of(cls, pairing: Pairing) -> PairingOut:
        return cls(
            code=pairing.code,
            channel=pairing.channel,
            external_id=pairing.external_id,
            display_name=pairing.display_name,
            created_at=pairing.created_at,
            expires_at=pairing.expires_at,
            approved_at=pairing.approved_at,
        )


class JobOut(BaseModel):
    id: str
    kind: Literal["summarize", "extract", "tidy"]
    state: Literal["pending", "failed"]
    attempts: int
    last_error: str | None
    next_attempt_at: datetime | None
    conversation_id: uuid.UUID | None
    user_id: uuid.UUID | None

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls(
            id=job.id,
            kind=job.kind,
            state=job.state,
            attempts=job.attempts,
            last_error=job.last_error,
            next_attempt_at=job.next_attempt_at,
            conversation_id=job.conversation_id,
            user_id=job.user_id,
        )


PairingPage = Page[PairingOut]
JobPage = Page[JobOut]
DeliveryPage = Page[OperatorMessage]


@router.get("/pairing", responses=responses(422))
async def list_pairing(
    pairings: PairingsDep,
    cursors: CursorsDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> PairingPage:
    """Requests waiting for an operator, oldest first."""
    key = scope("pairing")
    after = cursors.read(key, cursor)
    waiting = await pairings.waiting(
        after=None if after is None else (datetime.fromisoformat(after[0]), after[1]),
        limit=limit + 1,
    )
    shown, next_cursor = cursors.cut(
        key, waiting, limit, lambda pairing: [pairing.created_at.isoformat(), pairing.code]
    )
    return PairingPage(items=[PairingOut.of(p) for p in shown], next_cursor=next_cursor)


@router.post(
    "/pairing/{code}/approve", response_model=PairingOut, responses=responses(404, 409, 410)
)
async def approve_pairing(pairings: PairingsDep, once: OnceDep, code: Code) -> Response:
    """Let the person in for good; they write again to talk."""

    async def approve() -> PairingOut:
        return PairingOut.of(await pairings.approve(code))

    return await once.run(approve)


@router.post("/pairing/{code}/reject", response_model=PairingOut, responses=responses(404, 409))
async def reject_pairing(pairings: PairingsDep, once: OnceDep, code: Code) -> Response:
    """Turn the request down: it is forgotten (writing again asks anew)."""

    async def reject() -> PairingOut:
        return PairingOut.of(await pairings.reject(code))

    return await once.run(reject)


@router.get("/jobs", responses=responses(422))
async def list_jobs(
    retries: RetriesDep,
    cursors: CursorsDep,
    state: Literal["pending", "failed"] | None = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> JobPage:
    """Archive summaries, fact extractions and profile tidies still to do, kind by kind."""
    key = scope("jobs", state=state)
    position = cursors.read(key, cursor)
    kind_index, after = (0, None) if position is None else (int(position[0]), position[1])
    found = await retries.jobs(state, kind_index=kind_index, after=after, limit=limit + 1)
    shown, next_cursor = cursors.cut(
        key, found, limit, lambda job: [KINDS.index(job.kind), job.target]
    )
    return JobPage(items=[JobOut.of(job) for job in shown], next_cursor=next_cursor)


@router.post(
    "/jobs/{job_id}/retry", status_code=202, response_model=JobOut, responses=responses(404)
)
async def retry_job(retries: RetriesDep, once: OnceDep, job_id: JobId) -> Response:
    """Run a job again now, whatever its back-off said; answers the job as it was."""

    async def retry() -> JobOut:
        return JobOut.of(await retries.retry_job(job_id))

    return await once.run(retry, 202, about=lambda job: job.conversation_id or job.user_id)


@router.get("/deliveries", responses=responses(422))
async def list_deliveries(
    retries: RetriesDep,
    cursors: CursorsDep,
    state: Literal["failed"] = "failed",
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> DeliveryPage:
    """Replies the platform would not take after every retry, with its reason."""
    key = scope("deliveries", state=state)
    after = cursors.read(key, cursor)
    failed = await retries.failed_deliveries(
        after_id=0 if after is None else int(after[0]), limit=limit + 1
    )
    shown, next_cursor = cursors.cut(key, failed, limit, lambda m: [m.id])
    return DeliveryPage(items=[OperatorMessage.of(m) for m in shown], next_cursor=next_cursor)


@router.post(
    "/deliveries/{message_id}/retry", response_model=OperatorMessage, responses=responses(404)
)
async def retry_delivery(
    retries: RetriesDep,
    once: OnceDep,
    message_id: Annotated[int, Path(ge=1, le=MAX_INT64)],
) -> Response:
    """Send a failed reply again, from its first part the platform did not take."""

    async def retry() -> OperatorMessage:
        return OperatorMessage.of(await retries.retry_delivery(message_id))

    return await once.run(retry, about=lambda message: message.conversation_id)
