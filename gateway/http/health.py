"""Probes and metrics: alive; ready (database answering with the current schema, Redis
answering when it is configured); and what the gateway counts, for Prometheus. What
each reads is `gateway.operations.health`'s."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.http.deps import HealthDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(health: HealthDep) -> JSONResponse:
    reason = await health.unready()
    if reason is not None:
        return JSONResponse({"status": "unavailable", "detail": reason}, 503)
    return JSONResponse({"status": "ready"})


@router.get(
    "/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}}
)
async def metrics(health: HealthDep) -> Response:
    """Prometheus' text format; the stored-state gauges are read now, and a database
    that does not answer leaves them at their last values."""
    return Response(await health.metrics(), media_type=CONTENT_TYPE_LATEST)
