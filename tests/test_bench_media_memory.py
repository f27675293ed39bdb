"""The media-memory benchmark, run small: every file is fetched and answered in each
phase, and each phase reports its memory and the loop's lag."""

from __future__ import annotations

from bench.media_memory import run


async def test_a_small_run_fetches_every_file_and_reports_memory_and_lag() -> None:
    result = await run(photos=1, voices=1, scale=0.1)

    assert set(result["files"]) == {"photo0", "voice0"}
    for phase in ("text", "one at a time", "together"):
        report = result[phase]
        assert report["lag_max_ms"] >= report["lag_p99_ms"] >= report["lag_p50_ms"] >= 0
        assert report["peak_above_start_mb"] >= 0
    assert result["answered"] == {"text": 2, "one at a time": 2, "together": 2}
