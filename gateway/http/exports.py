"""`/exports/{token}`: the download a person's `/export` link opens, once."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import StreamingResponse

from gateway.http.api.erasure import export_response
from gateway.http.deps import ServicesDep
from gateway.http.problems import not_found

router = APIRouter(tags=["people"])


@router.get("/exports/{token}", response_class=StreamingResponse, include_in_schema=False)
async def download(
    services: ServicesDep, token: Annotated[str, Path(min_length=20, max_length=100)]
) -> StreamingResponse:
    user_id = await services.repos.rights.redeem_export_link(token, now=services.clock.now())
    if user_id is None:
        raise not_found("export link (it works once, for 24 hours)")
    return await export_response(services, user_id)
