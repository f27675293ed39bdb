"""Probes and metrics: alive; ready (database answering with the current schema, Redis
answering when it is configured); and what the gateway counts, for Prometheus."""

from __future__ import annotations

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.http.deps import ServicesDep
from gateway.services import Services
from memory.storage.migrate import current_revision, head_revision
from memory.storage.models import ChunkStatus

log = structlog.get_logger(__name__)

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    try:
        revision = await current_revision(services.engine)
    except Exception as exc:  # any database failure means "not ready", with the reason
        return JSONResponse({"status": "unavailable", "detail": type(exc).__name__}, 503)
    if revision != head_revision():
        return JSONResponse({"status": "unavailable", "detail": "schema out of date"}, 503)
    if not await services.queue.reachable():
        return JSONResponse({"status": "unavailable", "detail": "job queue unreachable"}, 503)
    return JSONResponse({"status": "ready"})


@router.get(
    "/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}}
)
async def metrics(services: ServicesDep) -> Response:
    """Prometheus' text format. The stored-state gauges are read now; if the database
    does not answer, they keep their last values and the counters are served anyway."""
    try:
        await _read_stored_state(services)
    except Exception as exc:
        log.warning("metrics without stored state", error=type(exc).__name__)
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def _read_stored_state(services: Services) -> None:
    metrics = services.metrics
    backlog = await services.archive.backlog()
    for status in ChunkStatus:
        metrics.archive_chunks.labels(status.value).set(backlog.chunks.get(status, 0))
    metrics.extraction_backlog.set(backlog.extractions.depth)
    waiting = backlog.summaries.oldest_at
    lag = 0.0 if waiting is None else (services.clock.now() - waiting).total_seconds()
    metrics.queue_lag.set(max(lag, 0.0))
    metrics.uncertain_parts.set(await services.repos.deliveries.uncertain_parts())
    metrics.facts_refused.set(await services.profiles.facts_refused())
