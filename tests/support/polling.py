"""Waiting for a condition with a deadline, for effects no event announces."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    until: Callable[[T], bool],
    seconds: float = 10.0,
    interval: float = 0.02,
) -> T:
    """Call `probe` every `interval` until `until(result)` holds; fail after `seconds`.

    A probe that costs (a query of every message) wants a longer interval. The timeout
    says what the probe last saw."""
    last: list[T] = []
    try:
        async with asyncio.timeout(seconds):
            while True:
                result = await probe()
                if until(result):
                    return result
                last[:] = [result]
                await asyncio.sleep(interval)
    except TimeoutError:
        seen = repr(last[0])[:4000] if last else "nothing (the probe never returned)"
        raise TimeoutError(f"not met within {seconds} s; the probe last saw {seen}") from None
