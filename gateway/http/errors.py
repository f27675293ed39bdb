"""How errors raised on purpose become HTTP answers.

No answer echoes what the client sent: input that could not be stored (a lone
surrogate, NaN) could not be encoded into the answer either.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gateway.errors import AuthError, InputError, RateLimited
from gateway.text import clean


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AuthError, _unauthorized)
    app.add_exception_handler(InputError, _unprocessable)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(RateLimited, _too_many)


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


async def _unprocessable(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status.HTTP_422_UNPROCESSABLE_CONTENT)


async def _invalid_request(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(
        {"detail": validation_errors(exc.errors())}, status.HTTP_422_UNPROCESSABLE_CONTENT
    )


async def _too_many(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RateLimited)
    return JSONResponse(
        {"detail": exc.detail, "retry_after": math.ceil(exc.retry_after)},
        status.HTTP_429_TOO_MANY_REQUESTS,
        headers={"Retry-After": retry_after_header(exc.retry_after)},
    )
