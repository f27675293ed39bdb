"""Request dependencies, as `Annotated` aliases the route modules share."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.requests import HTTPConnection

from gateway.http.operators import COOKIE, OperatorAuth
from gateway.http.paging import Cursors
from gateway.http.problems import ApiError
from gateway.services import Services


def _services(connection: HTTPConnection) -> Services:
    services: Services = connection.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(_services)]


def _operators(connection: HTTPConnection) -> OperatorAuth:
    operators: OperatorAuth = connection.app.state.operators
    return operators


OperatorsDep = Annotated[OperatorAuth, Depends(_operators)]


async def _admin(
    request: Request,
    services: ServicesDep,
    operators: OperatorsDep,
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """The admin token as a bearer token (scripts), or a dashboard session cookie with
    its CSRF token on every change (browsers)."""
    expected = services.settings.admin_token
    if expected is None:
        raise ApiError(
            503,
            "the REST API is off: set PARLEY_ADMIN_TOKEN (a secret of 16+ characters) to enable it",
        )
    if authorization is None and COOKIE in request.cookies:
        operator = await operators.operator(request)
        if operator is None:
            raise ApiError(401, "the dashboard session has ended: sign in again")
        operators.check_change(request, operator)
        return
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), expected.get_secret_value().encode()
    ):
        raise ApiError(
            401,
            "send the admin token as `Authorization: Bearer <PARLEY_ADMIN_TOKEN>`",
            headers={"WWW-Authenticate": "Bearer"},
        )


AdminDep = Depends(_admin)


def _cursors(request: Request) -> Cursors:
    cursors: Cursors = request.app.state.cursors
    return cursors


CursorsDep = Annotated[Cursors, Depends(_cursors)]
