"""The app factory: one FastAPI app per call, owning its resources through its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from gateway import api, health
from gateway.clock import Clock
from gateway.errors import AuthError, InputError
from gateway.limits import BodyLimit
from gateway.llm import LLMProvider
from gateway.services import Services
from gateway.settings import Settings, load_settings


def create_app(
    settings: Settings | None = None, *, llm: LLMProvider | None = None, clock: Clock | None = None
) -> FastAPI:
    settings = settings or load_settings()
    services = Services.build(settings, llm=llm, clock=clock)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await services.open()
        try:
            yield
        finally:
            await services.close()

    app = FastAPI(title="Parley", version="0.1.0", lifespan=lifespan)
    app.state.services = services
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_exception_handler(AuthError, _unauthorized)
    app.add_exception_handler(InputError, _unprocessable)
    app.include_router(health.router)
    app.include_router(api.router)
    for connector in services.connectors:
        if connector.router is not None:
            app.include_router(connector.router)
    return app


async def _unauthorized(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": str(exc)},
        status.HTTP_401_UNAUTHORIZED,
        headers={"WWW-Authenticate": "Bearer"},
    )


async def _unprocessable(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status.HTTP_422_UNPROCESSABLE_CONTENT)
