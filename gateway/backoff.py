"""Waiting between retries: one backoff and one reading of a server's `Retry-After`.

Model calls, reply delivery and the worker's reconnects all wait the same way:
exponential, capped, with full jitter (a uniform wait between zero and the capped
exponential), which spreads out clients that failed together so they do not all come
back at the same moment. A server's own wait, when it gives one, wins — within reason.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# No platform's wait is worth more than this; a larger one is a bug or an attack.
MAX_SERVER_WAIT_SECONDS = 3_600.0


def full_jitter(
    failures: int, base: float, cap: float, *, rng: random.Random | None = None
) -> float:
    """Seconds to wait after the `failures`-th consecutive failure (1 for the first)."""
    ceiling = min(cap, base * 2 ** max(0, failures - 1))
    return (rng or random).uniform(0, ceiling)


def server_wait(seconds: float | None, cap: float = MAX_SERVER_WAIT_SECONDS) -> float | None:
    """A wait a server asked for, if it is one: not negative, NaN or infinite; capped."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, cap)


def parse_retry_after(
    value: str | None, *, now: datetime | None = None, cap: float = MAX_SERVER_WAIT_SECONDS
) -> float | None:
    """`Retry-After` (delay-seconds or an HTTP date) in seconds; None if absent or
    unusable, so the caller's own backoff applies."""
    if value is None:
        return None
    try:
        return server_wait(float(value), cap)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return server_wait(max(0.0, (when - (now or datetime.now(UTC))).total_seconds()), cap)
