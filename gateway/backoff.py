"""Backoff between retries: exponential, capped, with full jitter.

Full jitter (a uniform wait between zero and the capped exponential) spreads out
clients that failed together, so they do not all come back at the same moment.
"""

from __future__ import annotations

import random


def full_jitter(
    failures: int, base: float, cap: float, *, rng: random.Random | None = None
) -> float:
    """Seconds to wait after the `failures`-th consecutive failure (1 for the first)."""
    ceiling = min(cap, base * 2 ** max(0, failures - 1))
    return (rng or random).uniform(0, ceiling)
