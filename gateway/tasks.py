"""Ending background tasks on shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Collection


async def finish_or_cancel(tasks: Collection[asyncio.Task[None]], deadline: float) -> None:
    """Let `tasks` finish within `deadline` seconds, then cancel what is left and wait
    for it to unwind."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=deadline)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
