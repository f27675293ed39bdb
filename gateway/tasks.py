"""Background tasks: run beside a block, ended on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection, Coroutine
from typing import Any


async def finish_or_cancel(tasks: Collection[asyncio.Task[None]], deadline: float) -> None:
    """Let `tasks` finish within `deadline` seconds, then cancel what is left and wait
    for it to unwind."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=deadline)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


@contextlib.asynccontextmanager
async def alongside(work: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    """Run `work` in a task for as long as the block runs; cancelled, and waited for,
    when the block ends."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
