"""Work that waits on an operator: pairing requests, memory jobs, failed deliveries."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel

from gateway.http.api.messages import OperatorMessage
from gateway.http.api.once import OnceDep
from gateway.http.deps import CursorsDep, ServicesDep
from gateway.http.paging import CursorQuery, LimitQuery, Page, scope
from gateway.http.problems import ApiError, not_found, responses
from gateway.services import Services
from gateway.text import MAX_INT64
from memory.archive.upkeep import EXTRACT, SUMMARIZE
from memory.profile.upkeep import TIDY
from memory.storage.pairing import Approval, Pairing
from memory.storage.work import KINDS, Job, Kind

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
    services: ServicesDep,
    cursors: CursorsDep,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> PairingPage:
    """Requests waiting for an operator, oldest first."""
    key = scope("pairing")
    after = cursors.read(key, cursor)
    waiting = await services.repos.pairings.pending_pairings(
        now=services.clock.now(),
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
async def approve_pairing(services: ServicesDep, once: OnceDep, code: Code) -> Response:
    """Let the person in for good; they write again to talk."""

    async def approve() -> PairingOut:
        outcome, pairing = await services.repos.pairings.approve_pairing(
            code, now=services.clock.now()
        )
        if pairing is None or outcome is Approval.UNKNOWN:
            raise not_found("pairing request")
        if outcome is Approval.EXPIRED:
            raise ApiError(410, "the code has expired; the person gets a new one by writing")
        return PairingOut.of(pairing)

    return await once.run(approve)


@router.post("/pairing/{code}/reject", response_model=PairingOut, responses=responses(404, 409))
async def reject_pairing(services: ServicesDep, once: OnceDep, code: Code) -> Response:
    """Turn the request down: it is forgotten (writing again asks anew)."""

    async def reject() -> PairingOut:
        pairing = await services.repos.pairings.reject_pairing(code)
        if pairing is None:
            raise not_found("pairing request waiting")
        return PairingOut.of(pairing)

    return await once.run(reject)


@router.get("/jobs", responses=responses(422))
async def list_jobs(
    services: ServicesDep,
    cursors: CursorsDep,
    state: Literal["pending", "failed"] | None = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> JobPage:
    """Archive summaries, fact extractions and profile tidies still to do, kind by kind."""
    key = scope("jobs", state=state)
    position = cursors.read(key, cursor)
    kind_index, after = (0, None) if position is None else (int(position[0]), position[1])
    found: list[Job] = []
    for kind in KINDS[kind_index:]:
        found += await services.repos.work.jobs(
            kind, state, after=after, limit=limit + 1 - len(found)
        )
        after = None
        if len(found) > limit:
            break
    shown, next_cursor = cursors.cut(
        key, found, limit, lambda job: [KINDS.index(job.kind), job.target]
    )
    return JobPage(items=[JobOut.of(job) for job in shown], next_cursor=next_cursor)


@router.post(
    "/jobs/{job_id}/retry", status_code=202, response_model=JobOut, responses=responses(404)
)
async def retry_job(services: ServicesDep, once: OnceDep, job_id: JobId) -> Response:
    """Run a job again now, whatever its back-off said; answers the job as it was."""

    async def retry() -> JobOut:
        kind, _, target = job_id.partition(":")
        job = await services.repos.work.job(_kind(kind), target)
        if job is None:
            raise not_found("job waiting (it may be done)")
        await _run_again(services, job)
        return JobOut.of(job)

    return await once.run(retry, 202, about=lambda job: job.conversation_id or job.user_id)


async def _run_again(services: Services, job: Job) -> None:
    work, now = services.repos.work, services.clock.now()
    # A key of its own: the queue may still hold (or remember) the job's last run.
    again = f"{job.id}:again:{now.timestamp()}"
    if job.kind == "summarize":
        if not await work.reopen_chunk(int(job.target), now, ready_too=False):
            raise ApiError(409, "a worker is summarising this chunk now")
        await services.queue.enqueue(SUMMARIZE, job.target, key=again)
    elif job.kind == "extract":
        await services.queue.enqueue(EXTRACT, job.target, key=again)
    else:
        await work.reopen_tidy(uuid.UUID(job.target))
        await services.queue.enqueue(TIDY, job.target, key=again)


def _kind(name: str) -> Kind:
    for kind in KINDS:
        if kind == name:
            return kind
    raise not_found("job")


@router.get("/deliveries", responses=responses(422))
async def list_deliveries(
    services: ServicesDep,
    cursors: CursorsDep,
    state: Literal["failed"] = "failed",
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> DeliveryPage:
    """Replies the platform would not take after every retry, with its reason."""
    key = scope("deliveries", state=state)
    after = cursors.read(key, cursor)
    failed = await services.repos.messages.failed_deliveries(
        after_id=0 if after is None else int(after[0]), limit=limit + 1
    )
    shown, next_cursor = cursors.cut(key, failed, limit, lambda m: [m.id])
    return DeliveryPage(items=[OperatorMessage.of(m) for m in shown], next_cursor=next_cursor)


@router.post(
    "/deliveries/{message_id}/retry", response_model=OperatorMessage, responses=responses(404)
)
async def retry_delivery(
    services: ServicesDep,
    once: OnceDep,
    message_id: Annotated[int, Path(ge=1, le=MAX_INT64)],
) -> Response:
    """Send a failed reply again, from its first part the platform did not take."""

    async def retry() -> OperatorMessage:
        message = await services.outbox.retry(message_id)
        if message is None:
            raise not_found("failed delivery")
        return OperatorMessage.of(message)

    return await once.run(retry, about=lambda message: message.conversation_id)
