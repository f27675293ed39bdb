"""Liveness and readiness probes: alive, and ready (database answering with the current
schema, Redis answering when it is configured)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from gateway.http.deps import ServicesDep
from memory.storage.schema import current_revision, head_revision

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
