"""The limits the fuzzed gateway runs with (the oracles assume them), and how many
examples each test runs."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

MAX_BODY_BYTES = 256 * 1024  # the default: deep nesting of 200,000 levels fits under it
MAX_MESSAGE_CHARS = 2_000  # small, so "too long" costs little to generate
ANSWER_SECONDS = 15.0
# What a 64-bit column holds. Stated here rather than taken from `gateway.text`, so a
# narrower limit there fails the oracles instead of moving them.
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def gateway_settings() -> dict[str, Any]:
    """Extra settings of every fuzzed gateway: the limits above, and the abuse limits out
    of the way (thousands of requests come from one address)."""
    return {
        "max_body_bytes": MAX_BODY_BYTES,
        "max_message_chars": MAX_MESSAGE_CHARS,
        "reply_wait_seconds": ANSWER_SECONDS,
        "webchat_sessions_per_minute": 1_000_000,
        "webchat_messages_per_minute": 1_000_000,
        "webchat_sockets_per_visitor": 1_000,
    }


def examples(count: int) -> settings:
    """Hypothesis settings: bounded, reproducible (derandomized), no example database.

    `PARLEY_TEST_FUZZ_SCALE` multiplies the counts for a longer local run.
    """
    scale = float(os.environ.get("PARLEY_TEST_FUZZ_SCALE", "1"))
    return settings(
        max_examples=max(1, int(count * scale)),
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )
