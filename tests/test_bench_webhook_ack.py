"""The webhook acknowledgement benchmark end to end with tiny numbers: `parley serve`,
the baseline and the fakes in their own processes, a few signed Telegram and WhatsApp
webhooks each, every one acknowledged, and every chat answered in order afterwards."""

from __future__ import annotations

import json

from bench.webhook_ack import Options, render, run


async def test_a_tiny_run_acknowledges_everything_and_every_turn_catches_up() -> None:
    options = Options(count=20, rate=50, chats=5, rounds=1, warmup=0, command="pytest")

    report = await run(options)

    assert [(s.platform, s.app) for s in report.segments] == [
        ("telegram", "baseline"),
        ("telegram", "gateway"),
        ("whatsapp", "baseline"),
        ("whatsapp", "gateway"),
    ]
    for segment in report.segments:
        assert segment.non_2xx == 0, segment.statuses
        assert len(segment.latencies) == 20
        # A send's lateness is the generator's share of its latency.
        assert 0 <= segment.send_late_p99_ms <= segment.max_ms
    for gateway in (s for s in report.segments if s.app == "gateway"):
        assert gateway.caught_up
        assert gateway.stored == 20
        assert gateway.lost == 0
        assert gateway.chats_out_of_order == 0, gateway.out_of_order_examples
        assert gateway.owing_conversations == 0
        assert gateway.replies_unmarked == 0
        assert gateway.model_requests is not None
        assert gateway.model_requests >= 5  # a turn at least per chat
    assert [v.platform for v in report.verdicts] == ["telegram", "whatsapp"]
    assert all(v.non_2xx == 0 and v.lost == 0 for v in report.verdicts)
    assert all(v.generator_late_p99_ms >= 0 for v in report.verdicts)
    figures = json.loads(json.dumps(report.to_json()))
    assert figures["machine"]["cpus"] >= 1
    assert figures["command"] == "pytest"
    assert "goal" in render(report)
