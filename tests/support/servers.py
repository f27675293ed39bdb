"""Run an ASGI app on a real localhost socket inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

import uvicorn

from gateway.http.server import server_config
from gateway.settings import Settings

START_DEADLINE_SECONDS = 10.0
# How long stopping may take beyond the gateway's own shutdown budget (which it may
# spend whole waiting for a turn still running, as it does on a busy machine).
STOP_MARGIN_SECONDS = 10.0


@contextlib.asynccontextmanager
async def serve(
    app: Any, *, lifespan: Literal["on", "off"] = "off", settings: Settings | None = None
) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 at a free port; yield its base URL (no trailing slash).

    With `settings`, the server runs as `parley serve` runs it (timeouts, frame limits).
    """
    if settings is not None:
        config = server_config(app, settings, host="127.0.0.1", port=0)
    else:
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            lifespan=lifespan,
            log_level="warning",
            ws="websockets-sansio",
        )
    stop_deadline = STOP_MARGIN_SECONDS + (settings.shutdown_seconds if settings else 0.0)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(START_DEADLINE_SECONDS):
            while not server.started:
                if task.done():
                    task.result()  # re-raise the start-up failure
                    raise RuntimeError("server stopped before it started")
                await asyncio.sleep(0.005)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=stop_deadline)
