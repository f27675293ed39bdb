"""The reminder-load benchmark, run small: both databases turn and sweep, nothing
fires, and the sweep's query is answered from the due-time index."""

from __future__ import annotations

from bench.reminder_load import Options, render, run


async def test_a_small_run_compares_turns_and_sweeps_and_shows_an_indexed_sweep() -> None:
    result = await run(Options(schedules=3_000, turns=5, warmup=1, as_json=False))

    assert result["schedules"] == 3_000
    assert set(result["turn_cpu"]) == {"0 schedules", "3000 schedules"}
    assert all(f["median_ms"] > 0 for f in result["turn_cpu"].values())
    assert any("ix_schedules_next_due_at" in step for step in result["sweep_plan"])
    assert "sweep plan:" in render(result)
