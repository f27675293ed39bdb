"""The idle-sockets benchmark end to end with tiny numbers: `parley serve` and the
bare baseline each hold a few web chat sockets, and every timed message reaches the
socket it was sent to."""

from __future__ import annotations

import json

from bench.idle_sockets import Options, render, run


async def test_a_tiny_run_holds_every_socket_and_delivers_every_sampled_message() -> None:
    options = Options(
        sockets=20,
        sample=5,
        idle_seconds=1.0,
        settle_seconds=0.2,
        warmup_sockets=4,
        concurrency=8,
        clients=2,
        command="pytest",
    )

    report = await run(options)

    gateway, baseline = report["results"]
    for result in (gateway, baseline):
        assert result["opened"] == result["still_open_at_end"] == 20
        assert result["failed_to_open"] == 0
        delivery = result["delivery"]
        assert delivery["arrived"] == delivery["sample"] == 5
        assert delivery["lost"] == 0
        assert delivery["p50_ms"] <= delivery["p99_ms"] <= delivery["max_ms"]
        assert "rss_kb_per_socket" in result
        assert result["idle"]["wall_seconds"] >= 1.0
        assert result["idle_before"]["wall_seconds"] >= 1.0
    # The gateway counts its collections (/metrics), for each step; the baseline does not.
    assert set(gateway["gc_pauses"]) == {"opening", "idle", "delivery"}
    assert set(gateway["gc_pauses"]["delivery"]) == {"0", "1", "2"}
    assert all(p["collections"] >= 0 for p in gateway["gc_pauses"]["opening"].values())
    assert baseline["gc_pauses"] == {}
    assert report["goals"]["all_sockets_held"] is True
    assert report["fd_limit"]["soft"] >= report["fd_limit"]["needed"]
    assert json.loads(json.dumps(report))["options"]["sockets"] == 20
    assert "gateway (parley serve)" in render(report)
