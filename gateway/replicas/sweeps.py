"""Sweeps: now and then, find in the database what is owed (turns to start, replies to
send, memory jobs to queue) and see to it, so that a lost wake-up, a flushed queue or a
dead replica costs time, never work. A sweep that fails (the database briefly down) is
logged and tried again at the next interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

import structlog

from memory.storage.leases import Leases

log = structlog.get_logger(__name__)

LEASE_PREFIX = "sweep:"


async def sweep_forever(
    sweep: Callable[[], Awaitable[object]],
    every: float,
    *,
    name: str,
    leases: Leases | None = None,
    at_once: bool = False,
) -> None:
    """Run `sweep` every `every` seconds until cancelled; first at once if `at_once`.

    With `leases`, one replica at a time sweeps: whoever holds the sweep's lease, which
    lapses three intervals after its holder last swept (so another takes over when it
    dies)."""
    if not at_once:
        await asyncio.sleep(every)
    while True:
        try:
            if leases is None or await leases.claim(
                LEASE_PREFIX + name, timedelta(seconds=3 * every)
            ):
                await sweep()
        except Exception:
            log.exception("sweep failed", sweep=name)
        await asyncio.sleep(every)
