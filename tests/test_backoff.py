"""One reading of a server's Retry-After for every client: seconds or an HTTP date,
never negative, NaN or infinite (which would stall a chat for good), always capped."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.backoff import MAX_SERVER_WAIT_SECONDS, parse_retry_after, server_wait

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        ("0.5", 0.5),
        ("0", 0.0),
        ("Tue, 01 Dec 2026 12:00:30 GMT", 30.0),
        ("Tue, 01 Dec 2026 11:00:00 GMT", 0.0),  # a date already past: go now
        ("999999999", MAX_SERVER_WAIT_SECONDS),
        ("Fri, 01 Dec 2028 12:00:00 GMT", MAX_SERVER_WAIT_SECONDS),
        (None, None),
        ("", None),
        ("-5", None),
        ("nan", None),
        ("inf", None),
        ("Infinity", None),
        ("soon", None),
        ("Tue, 99 Foo 2026 99:99:99 GMT", None),
    ],
)
def test_retry_after_is_read_bounded_or_ignored(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


def test_a_platforms_own_number_is_bounded_too() -> None:
    assert server_wait(float("inf")) is None
    assert server_wait(-1.0) is None
    assert server_wait(10.0) == 10.0
    assert server_wait(10**9) == MAX_SERVER_WAIT_SECONDS
