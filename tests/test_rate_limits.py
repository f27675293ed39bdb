"""The in-process moving windows (the shared ones, in Redis, are in test_replicas)."""

from __future__ import annotations

import pytest

from gateway.errors import RateLimited
from gateway.replicas.rate_limits import LocalWindows, RateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_key_may_act_so_often_in_any_minute() -> None:
    clock = Clock()
    windows = LocalWindows(clock)
    for second in (0, 10, 20):
        clock.now = 1000.0 + second
        assert await windows.hit("messages", "visitor", 3) is None

    clock.now = 1030.0
    assert await windows.hit("messages", "visitor", 3) == pytest.approx(30.0)
    # A refused hit spends nothing: the first one still frees its place at 1060.
    clock.now = 1059.0
    assert await windows.hit("messages", "visitor", 3) == pytest.approx(1.0)
    clock.now = 1060.0
    assert await windows.hit("messages", "visitor", 3) is None
    assert await windows.hit("messages", "visitor", 3) == pytest.approx(10.0)


async def test_keys_and_kinds_count_apart() -> None:
    windows = LocalWindows(Clock())
    assert await windows.hit("messages", "a", 1) is None
    assert await windows.hit("messages", "b", 1) is None
    assert await windows.hit("uploads", "a", 1) is None
    assert await windows.hit("messages", "a", 1) is not None


async def test_keys_gone_quiet_are_forgotten() -> None:
    clock = Clock()
    windows = LocalWindows(clock)
    for visitor in range(100):
        await windows.hit("messages", f"visitor {visitor}", 5)
    clock.now += 30
    await windows.hit("messages", "still here", 5)
    assert len(windows) == 101

    clock.now += 31  # a minute after the first hundred, half one after the last
    await windows.hit("messages", "newcomer", 5)
    assert len(windows) == 2


async def test_a_refusal_says_when_to_come_back() -> None:
    clock = Clock()
    limit = RateLimit(LocalWindows(clock), 1, "messages")
    await limit.take("visitor")
    clock.now += 59.5
    with pytest.raises(RateLimited, match="too many messages") as refused:
        await limit.take("visitor")
    assert refused.value.retry_after == 1.0  # never less than a second
