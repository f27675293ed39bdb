"""The model stream benchmark end to end with tiny numbers: the fake model in its own
process, the three kinds of call measured for each piece count, and their ratios."""

from __future__ import annotations

from bench.model_stream import ratios, run


async def test_a_tiny_run_measures_every_call_for_every_piece_count() -> None:
    segments = await run(calls=5, piece_counts=[3, 40], rounds=1)

    assert [(s.what, s.pieces) for s in segments] == [
        ("baseline", 3),
        ("aiohttp", 3),
        ("gateway", 3),
        ("baseline", 40),
        ("aiohttp", 40),
        ("gateway", 40),
    ]
    assert all(s.cpu_us_per_call > 0 and s.wall_ms_per_call > 0 for s in segments)
    assert set(ratios(segments)) == set(ratios(segments, "aiohttp")) == {3, 40}
