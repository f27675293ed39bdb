"""How errors raised on purpose become HTTP answers, in this one place: routes and
the application services they call raise what went wrong (`gateway.errors`, or a
service's own error), never a status.

No answer echoes what the client sent: input that could not be stored (a lone
surrogate, NaN) could not be encoded into the answer either.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gateway.errors import (
    AuthError,
    Conflict,
    Gone,
    InputError,
    LLMError,
    MediaRefused,
    NotFound,
    RateLimited,
)
from gateway.http.problems import ApiError, body
from gateway.operations.operator_messages import NoModel, NoRecipient
from gateway.text import clean
from memory.portable.format import ExportFormatError
from memory.portable.owner import ImportConflict
from memory.profile.facts import EditError, StaleRevision

OPERATOR_API = "/api/"


@dataclass(frozen=True, slots=True)
class _Problem:
    status: int
    code: str | None = None  # None: the status's own (`problems.CODES`)
    message: Callable[[Any], str] = str


def _stale(exc: StaleRevision) -> str:
    return f"the profile is at revision {exc.current} now: read it again"


# What each domain error is on the wire. The most specific class wins (Starlette looks
# a handler up along the exception's MRO), so NoRecipient is not just any InputError.
DOMAIN_PROBLEMS: dict[type[Exception], _Problem] = {
    NotFound: _Problem(404),
    Conflict: _Problem(409),
    Gone: _Problem(410),
    NoRecipient: _Problem(422, "no_recipient"),
    NoModel: _Problem(422, "no_model"),
    LLMError: _Problem(
        503, "model_unavailable", lambda _: "the model did not answer; try again later"
    ),
    StaleRevision: _Problem(412, message=_stale),
    EditError: _Problem(422, "invalid_edit"),
    ExportFormatError: _Problem(422, "invalid_export"),
    ImportConflict: _Problem(409, "import_conflict"),
}


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AuthError, _unauthorized)
    app.add_exception_handler(InputError, _unprocessable)
    app.add_exception_handler(MediaRefused, _refused_file)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(RateLimited, _too_many)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)
    for error in DOMAIN_PROBLEMS:
        app.add_exception_handler(error, _domain_error)


def retry_after_header(seconds: float) -> str:
    """Whole seconds, at least one: clients that wait less would only be refused again."""
    return str(max(1, math.ceil(seconds)))


def validation_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic's errors without the offending input: where, what and why."""
    return [
        {
            "loc": [clean(part) if isinstance(part, str) else part for part in error["loc"]],
            # Our validators' reasons read better without pydantic's prefix.
            "msg": clean(str(error["msg"]).removeprefix("Value error, ")),
            "type": error["type"],
        }
        for error in errors
    ]


async def _unauthorized(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": str(exc)},
        status.HTTP_401_UNAUTHORIZED,
        headers={"WWW-Authenticate": "Bearer"},
    )


async def _unprocessable(request: Request, exc: Exception) -> JSONResponse:
    if _operator_api(request):
        return JSONResponse(body(422, str(exc)), status.HTTP_422_UNPROCESSABLE_CONTENT)
    # The shape FastAPI documents for every 422: a list of what was wrong.
    problem = {"loc": ["body"], "msg": str(exc), "type": "value_error"}
    return JSONResponse({"detail": [problem]}, status.HTTP_422_UNPROCESSABLE_CONTENT)


# A refused file's status: too large 413, a kind not read 415, else (corrupt, empty) 422.
FILE_STATUS = {"too_large": 413, "unsupported": 415}


async def _refused_file(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MediaRefused)
    problem = {"loc": ["body", "file"], "msg": str(exc), "type": exc.reason}
    return JSONResponse({"detail": [problem]}, FILE_STATUS.get(exc.reason, 422))


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    fields = validation_errors(exc.errors())
    if _operator_api(request):
        return JSONResponse(
            body(422, _summary(fields), fields=fields), status.HTTP_422_UNPROCESSABLE_CONTENT
        )
    return JSONResponse({"detail": fields}, status.HTTP_422_UNPROCESSABLE_CONTENT)


def _summary(fields: list[dict[str, Any]]) -> str:
    first = fields[0] if fields else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    return f"{where}: {first['msg']}{more}" if where else f"{first['msg']}{more}"


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(body(exc.status, exc.message, code=exc.code), exc.status, exc.headers)


async def _domain_error(_: Request, exc: Exception) -> JSONResponse:
    problem = next(DOMAIN_PROBLEMS[c] for c in type(exc).__mro__ if c in DOMAIN_PROBLEMS)
    return await _api_error(_, ApiError(problem.status, problem.message(exc), code=problem.code))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own errors (unknown route, method): the operator API's shape under
    `/api/`, FastAPI's elsewhere."""
    assert isinstance(exc, HTTPException)
    if _operator_api(request):
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        return JSONResponse(body(exc.status_code, message), exc.status_code, exc.headers)
    return JSONResponse({"detail": exc.detail}, exc.status_code, exc.headers)


def _operator_api(request: Request) -> bool:
    return request.url.path.startswith(OPERATOR_API)


async def _too_many(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RateLimited)
    return JSONResponse(
        {"detail": exc.detail, "retry_after": math.ceil(exc.retry_after)},
        status.HTTP_429_TOO_MANY_REQUESTS,
        headers={"Retry-After": retry_after_header(exc.retry_after)},
    )
