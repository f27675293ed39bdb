"""Request dependencies, as `Annotated` aliases the route modules share.

Each is `async` although none awaits anything: FastAPI runs a plain function in its
thread pool, a hop to another thread and back for every dependency of every request.

A route declares the application services it uses, one alias each (`SessionsDep`,
`PeopleDep`, ...): never the whole `Services`, never a repository. Only this module
reads them out of the app's `Services`.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.requests import HTTPConnection

from gateway.events.hub import Hub
from gateway.http.operators import COOKIE, OperatorAuth
from gateway.http.paging import Cursors
from gateway.http.problems import ApiError
from gateway.operations import (
    Chunks,
    Erasing,
    ExportLinks,
    Health,
    Idempotency,
    Operations,
    OperatorMessages,
    Overview,
    PairingRequests,
    People,
    PersonProfiles,
    PersonReminders,
    Portability,
    Retries,
    Sessions,
    UsageReports,
)
from gateway.services import Services
from gateway.settings import Settings


def _services(connection: HTTPConnection) -> Services:
    services: Services = connection.app.state.services
    return services


async def _operations(connection: HTTPConnection) -> Operations:
    return _services(connection).operations


_OperationsDep = Annotated[Operations, Depends(_operations)]


async def _settings(connection: HTTPConnection) -> Settings:
    return _services(connection).settings


async def _hub(connection: HTTPConnection) -> Hub:
    return _services(connection).hub


SettingsDep = Annotated[Settings, Depends(_settings)]
HubDep = Annotated[Hub, Depends(_hub)]


async def _sessions(operations: _OperationsDep) -> Sessions:
    return operations.sessions


SessionsDep = Annotated[Sessions, Depends(_sessions)]


async def _usage(operations: _OperationsDep) -> UsageReports:
    return operations.usage


UsageDep = Annotated[UsageReports, Depends(_usage)]


async def _people(operations: _OperationsDep) -> People:
    return operations.people


PeopleDep = Annotated[People, Depends(_people)]


async def _reminders(operations: _OperationsDep) -> PersonReminders:
    return operations.reminders


RemindersDep = Annotated[PersonReminders, Depends(_reminders)]


async def _profiles(operations: _OperationsDep) -> PersonProfiles:
    return operations.profiles


ProfilesDep = Annotated[PersonProfiles, Depends(_profiles)]


async def _chunks(operations: _OperationsDep) -> Chunks:
    return operations.chunks


ChunksDep = Annotated[Chunks, Depends(_chunks)]


async def _pairings(operations: _OperationsDep) -> PairingRequests:
    return operations.pairings


PairingsDep = Annotated[PairingRequests, Depends(_pairings)]


async def _retries(operations: _OperationsDep) -> Retries:
    return operations.retries


RetriesDep = Annotated[Retries, Depends(_retries)]


async def _messages(operations: _OperationsDep) -> OperatorMessages:
    return operations.messages


OperatorMessagesDep = Annotated[OperatorMessages, Depends(_messages)]


async def _erasing(operations: _OperationsDep) -> Erasing:
    return operations.erasing


ErasingDep = Annotated[Erasing, Depends(_erasing)]


async def _portability(operations: _OperationsDep) -> Portability:
    return operations.portability


PortabilityDep = Annotated[Portability, Depends(_portability)]


async def _export_links(operations: _OperationsDep) -> ExportLinks:
    return operations.export_links


ExportLinksDep = Annotated[ExportLinks, Depends(_export_links)]


async def _overview(operations: _OperationsDep) -> Overview:
    return operations.overview


OverviewDep = Annotated[Overview, Depends(_overview)]


async def _idempotency(operations: _OperationsDep) -> Idempotency:
    return operations.idempotency


IdempotencyDep = Annotated[Idempotency, Depends(_idempotency)]


async def _health(operations: _OperationsDep) -> Health:
    return operations.health


HealthDep = Annotated[Health, Depends(_health)]


async def _operators(connection: HTTPConnection) -> OperatorAuth:
    operators: OperatorAuth = connection.app.state.operators
    return operators


OperatorsDep = Annotated[OperatorAuth, Depends(_operators)]


async def _admin(
    request: Request,
    settings: SettingsDep,
    operators: OperatorsDep,
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """The admin token as a bearer token (scripts), or a dashboard session cookie with
    its CSRF token on every change (browsers)."""
    expected = settings.admin_token
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


async def _cursors(request: Request) -> Cursors:
    cursors: Cursors = request.app.state.cursors
    return cursors


CursorsDep = Annotated[Cursors, Depends(_cursors)]
