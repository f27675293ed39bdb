"""The app factory: one FastAPI app per call, owning its resources through its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway.clock import Clock
from gateway.http import admin, api, docs, exports, health
from gateway.http.access_log import AccessLog
from gateway.http.body_limit import UPLOAD_FORM_BYTES, UPLOADS_PATH, BodyLimit
from gateway.http.cors import WebchatCORS
from gateway.http.errors import install_error_handlers
from gateway.http.headers import SecurityHeaders
from gateway.http.operators import OperatorAuth, sign_in_url
from gateway.http.paging import Cursors
from gateway.http.sockets import SocketPaths
from gateway.llm import LLMProvider
from gateway.secrets import signing_keys
from gateway.services import Services
from gateway.settings import Settings, load_settings


def create_app(
    settings: Settings | None = None,
    *,
    llm: LLMProvider | None = None,
    clock: Clock | None = None,
    sign_in_link: Callable[[str], None] | None = None,
    started: Callable[[], None] | None = None,
) -> FastAPI:
    """`sign_in_link`: told, once the gateway runs, a one-time link that signs a
    browser in to the dashboard (`parley serve` on a terminal shows it); `started`:
    called once everything has started."""
    settings = settings or load_settings()
    services = Services.build(settings, llm=llm, clock=clock)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with services.running():
            if sign_in_link is not None:
                sign_in_link(sign_in_url(settings, await app.state.operators.link()))
            if started is not None:
                started()
            yield

    app = FastAPI(title="Parley", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.services = services
    app.state.cursors = Cursors(signing_keys(settings))
    admin_token = settings.admin_token
    app.state.operators = OperatorAuth(
        services.repos.operator_sessions,
        signing_keys(settings),
        None if admin_token is None else admin_token.get_secret_value(),
        services.clock,
        services.rate_limits,
    )
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        read_timeout=settings.read_timeout_seconds,
        # A file and the form around it.
        by_path={
            UPLOADS_PATH: (
                settings.media_max_bytes + UPLOAD_FORM_BYTES,
                settings.upload_timeout_seconds,
            )
        },
    )
    app.add_middleware(SecurityHeaders)
    app.add_middleware(
        SocketPaths,
        endpoints={
            path: endpoint
            for connector in services.connectors
            for path, endpoint in connector.sockets.items()
        },
    )
    # Unset, the web chat is for Parley's own pages: its socket refuses any other.
    app.add_middleware(WebchatCORS, origins=settings.webchat_allowed_origins)
    app.add_middleware(AccessLog)  # outermost: it sees every answer, 413s included
    install_error_handlers(app)
    # Routers are matched in order, each walked whole (160 µs to reach the last of
    # them): the platforms' webhooks, which wait for their answer, come first.
    for connector in services.connectors:
        if connector.router is not None:
            app.include_router(connector.router)
    app.include_router(health.router)
    app.include_router(docs.router)
    app.include_router(api.router)
    app.include_router(exports.router)
    app.include_router(admin.router)
    return app
