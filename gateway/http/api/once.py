"""`Idempotency-Key` on every POST: a request sent twice is carried out once.

The first request with a key runs and its answer is kept for 24 h (in the database,
so every replica answers a replay the same); the same key with another request is a
409. A request that fails releases its key, so the client may simply try again. The
keys are kept by `gateway.operations.idempotency`; here is what HTTP sees of them.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Header, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from gateway.http.deps import IdempotencyDep
from gateway.http.problems import ApiError
from gateway.operations.idempotency import KEY_LIFETIME, Idempotency
from memory.storage.idempotency import Claimed, KeyConflict, Replay

M = TypeVar("M", bound=BaseModel)

__all__ = ["KEY_LIFETIME", "Once", "OnceDep"]


class Once:
    def __init__(self, keys: Idempotency, key_hash: str | None, request_hash: str) -> None:
        self._keys = keys
        self._key_hash = key_hash
        self._request_hash = request_hash

    async def run(
        self,
        answer: Callable[[], Awaitable[M]],
        status_code: int = 200,
        about: Callable[[M], uuid.UUID | None] = lambda _: None,
    ) -> Response:
        """`answer()` once per key; `about`: the conversation or person the answer is
        about, whose erasure takes the kept answer with it."""
        if self._key_hash is None:
            return _json(await answer(), status_code)
        keys = self._keys
        claim = await keys.claim(self._key_hash, self._request_hash)
        if isinstance(claim, Replay):
            return Response(
                claim.response,
                claim.status_code,
                media_type="application/json",
                headers={"Idempotent-Replayed": "true"},
            )
        if isinstance(claim, KeyConflict):
            raise _conflict(claim.reason)
        assert isinstance(claim, Claimed)
        try:
            result = await answer()
        except BaseException:
            await keys.release(self._key_hash)
            raise
        response = _json(result, status_code)
        await keys.finish(self._key_hash, status_code, bytes(response.body).decode(), about(result))
        return response


async def _once(
    request: Request,
    keys: IdempotencyDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            min_length=1,
            max_length=255,
            pattern=r"^[\x21-\x7e]+$",
            description="Any printable ASCII; a replay within 24 h gets the first answer",
        ),
    ] = None,
) -> Once:
    if idempotency_key is None:
        return Once(keys, None, "")
    digest = hashlib.sha256()
    for part in (request.method.encode(), request.url.path.encode(), await request.body()):
        digest.update(len(part).to_bytes(8, "big") + part)
    return Once(keys, hashlib.sha256(idempotency_key.encode()).hexdigest(), digest.hexdigest())


OnceDep = Annotated[Once, Depends(_once)]


def _conflict(reason: str) -> ApiError:
    if reason == "mismatch":
        return ApiError(
            409,
            "this Idempotency-Key was used with another request; use a new key",
            code="idempotency_key_reused",
        )
    return ApiError(
        409,
        "the first request with this Idempotency-Key is still running; try again shortly",
        code="idempotency_key_in_progress",
        headers={"Retry-After": "1"},
    )


def _json(model: BaseModel, status_code: int) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code)
