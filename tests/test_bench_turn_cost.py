"""The turn cost benchmark end to end with tiny numbers: `parley serve`, the baseline
and the fakes in their own processes; every web chat turn answered in its request, every
Telegram turn answered on the fake Bot API, and the figures paired per concurrency."""

from __future__ import annotations

import json

from bench.turn_cost import Options, render, run


async def test_a_tiny_run_answers_every_turn_and_pairs_the_figures() -> None:
    options = Options(turns=6, warmup=1, concurrency=(1, 2), rounds=1, turns_per_person=4)

    result = await run(options)

    assert [(s["app"], s["concurrency"]) for s in result["segments"]] == [
        (f"{app}/{workload}", concurrency)
        for workload in ("webchat", "telegram")
        for concurrency in (1, 2)
        for app in ("baseline", "gateway")
    ]
    for segment in result["segments"]:
        assert segment["requests"] == 6
        # /proc counts in clock ticks (10 ms): six baseline requests may show none.
        assert segment["server_cpu_ms"] > 0 or segment["app"].startswith("baseline")
    assert [(v["workload"], v["concurrency"]) for v in result["verdicts"]] == [
        ("webchat", 1),
        ("webchat", 2),
        ("telegram", 1),
        ("telegram", 2),
    ]
    # A Telegram turn waits for its reply, which the gateway paces a second apart per
    # chat: each turn took a chat that had rested, or a new one.
    telegram = [s for s in result["segments"] if s["app"] == "gateway/telegram"]
    assert all(s["max_ms"] < 1000 for s in telegram), telegram
    assert json.loads(json.dumps(result))["machine"]["cpus"] >= 1
    assert "CPU x" in render(result)
