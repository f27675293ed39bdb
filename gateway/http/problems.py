"""The operator API's one error shape: `{"error": {"code", "message"}}`.

Routes raise `ApiError`; the app's handlers (gateway.http.errors) also give FastAPI's
own errors (validation, unknown routes, methods) this shape under `/api/`.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from pydantic import BaseModel

# One code per status, so a client can branch on the code alone.
CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    412: "precondition_failed",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    428: "precondition_required",
    429: "rate_limited",
    503: "unavailable",
}


class FieldProblem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    code: str
    message: str
    # Which fields were wrong, for a 422 from validation.
    fields: list[FieldProblem] | None = None


class ErrorOut(BaseModel):
    error: Problem


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or code_of(status)
        self.message = message
        self.headers = headers


def code_of(status: int) -> str:
    return CODES.get(status) or HTTPStatus(status).phrase.lower().replace(" ", "_")


def body(status: int, message: str, *, code: str | None = None, **extra: Any) -> dict[str, Any]:
    problem: dict[str, Any] = {"code": code or code_of(status), "message": message, **extra}
    return {"error": problem}


def not_found(what: str) -> ApiError:
    return ApiError(404, f"no such {what}")


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the errors an operation can answer."""
    return {
        status: {"model": ErrorOut, "description": HTTPStatus(status).phrase} for status in statuses
    }
