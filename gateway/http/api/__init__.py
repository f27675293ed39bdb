"""The operator REST API (`/api/v1`), behind the admin bearer token."""

from fastapi import APIRouter

from gateway.http.api import (
    erasure,
    memory,
    messages,
    operations,
    people,
    reminders,
    sessions,
    stats,
    usage,
)
from gateway.http.deps import AdminDep
from gateway.http.problems import responses

router = APIRouter(prefix="/api/v1", dependencies=[AdminDep], responses=responses(401, 422, 503))
for part in (sessions, messages, memory, people, reminders, erasure, operations, stats, usage):
    router.include_router(part.router)
