"""The turn-writes benchmark with tiny numbers: both ways store every turn, and the
inline way takes the trips to SQLite's thread that it should (a message's seq and its
commit, a part's mark and its commit, the sent part and its commit), the other one a
trip a statement."""

from __future__ import annotations

from bench.turn_writes import Options, render, run


async def test_a_tiny_run_counts_the_trips_each_way_takes() -> None:
    result = await run(Options(turns=5, blocks=2, as_json=False))

    # Per turn: two messages (their seq's UPDATE and the commit; as before, also the
    # INSERT, and the reply's usage), the part's mark (UPDATE, commit), the part sent
    # (its INSERT and the commit; as before, also the reply's UPDATE).
    assert result["medians"]["inline"]["trips"] == 8
    assert result["medians"]["thread"]["trips"] == 12
    assert all(len(way["cpu_us"]) == 2 for way in result["blocks_per_way"].values())
    assert "inline/thread CPU" in render(result)
