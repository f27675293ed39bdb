"""The connection-lending benchmark with tiny numbers: both ways read, each block is
timed, and the report names the ratio."""

from __future__ import annotations

from bench.connection_lending import Options, render, run


async def test_a_tiny_run_times_both_ways() -> None:
    result = await run(Options(reads=20, blocks=2, database_url=None, as_json=False))

    assert result["database"] == "sqlite"
    assert all(len(blocks) == 2 for blocks in result["blocks_per_way"].values())
    assert all(cpu_us > 0 for cpu_us in result["median_cpu_us"].values())
    assert set(result["blocks_per_way"]) == {"one greenlet", "async connection"}
    assert "one greenlet/async connection CPU" in render(result)
