"""Run an ASGI app on a real localhost socket inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

import uvicorn

from gateway.http.server import server_config
from gateway.settings import Settings

START_DEADLINE_SECONDS = 30.0  # a guard against a hang; a loaded CI machine starts slowly
# How long stopping may take beyond the gateway's own shutdown budgets (for open
# connections, then for a turn still running, either of which it may spend whole on a
# busy machine).
STOP_MARGIN_SECONDS = 10.0


@contextlib.asynccontextmanager
async def serve(
    app: Any,
    *,
    lifespan: Literal["on", "off"] = "off",
    settings: Settings | None = None,
    **options: Any,
) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 at a free port; yield its base URL (no trailing slash).

    With `settings`, the server runs as `parley serve` runs it (timeouts, frame limits);
    without, `options` are uvicorn's (`uvicorn.Config`).
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
            **{"ws": "websockets-sansio", **options},
        )
    stop_deadline = STOP_MARGIN_SECONDS + (2 * settings.shutdown_seconds if settings else 0.0)
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
        done, _ = await asyncio.wait({task}, timeout=stop_deadline)
        if not done:
            stuck = _describe(server, task)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise TimeoutError(f"the server did not stop within {stop_deadline} s:\n{stuck}")
        task.result()


def _describe(server: uvicorn.Server, serving: asyncio.Task[None]) -> str:
    """What a server that will not stop is still waiting for."""
    state = server.server_state
    lines = [f"{len(state.connections)} open connection(s): {state.connections!r}"]
    for stuck in (serving, *state.tasks):
        lines.append(f"task {stuck.get_name()}: {' > '.join(_awaiting(stuck.get_coro()))}")
    return "\n".join(lines)


def _awaiting(awaitable: object) -> list[str]:
    """Where a suspended coroutine is, down the chain of what each part awaits."""
    where: list[str] = []
    while (
        frame := getattr(awaitable, "cr_frame", None) or getattr(awaitable, "ag_frame", None)
    ) is not None:
        where.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "ag_await", None)
    return where
