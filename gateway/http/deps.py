"""Request dependencies, as `Annotated` aliases the route modules share."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request

from gateway.http.paging import Cursors
from gateway.http.problems import ApiError
from gateway.services import Services


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(_services)]


def _admin(services: ServicesDep, authorization: Annotated[str | None, Header()] = None) -> None:
    expected = services.settings.admin_token
    if expected is None:
        raise ApiError(
            503,
            "the REST API is off: set PARLEY_ADMIN_TOKEN (a secret of 16+ characters) to enable it",
        )
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
