"""The load generator's own garbage: none is collected while a segment is measured, all
of it once the segment is over."""

from __future__ import annotations

import gc
import weakref

from bench.turn_load import collector_paused, run_workers


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


async def test_cycles_made_during_a_segment_wait_for_its_end() -> None:
    made: list[weakref.ref[_Node]] = []

    async def worker(_: int) -> None:
        for _ in range(1000):  # past the youngest generation's threshold (700)
            made.append(weakref.ref(_Node()))
        assert not gc.isenabled()
        assert all(ref() is not None for ref in made)

    await run_workers(2, worker)

    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert all(ref() is None for ref in made)


def test_what_exists_before_a_segment_is_frozen_during_it() -> None:
    with collector_paused():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
