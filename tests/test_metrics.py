"""/metrics: what happened, counted where it happened, in Prometheus' text format."""

from __future__ import annotations

import gc
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM, Reply
from tests.fakes.telegram_api import flood
from tests.support.harness import Gateway, make_settings, running_gateway
from tests.support.platforms import platform_gateway
from tests.support.polling import eventually

CHAT = 4242


async def _samples(gw: Gateway) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = await gw.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _get(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_a_web_chat_turn_is_counted_and_timed(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Reply("hello back", pieces=2, cached=6))
    async with running_gateway(make_settings(database_url, tmp_path / "a", llm)) as gw:
        before = await _samples(gw)
        token, _ = await gw.visitor()
        await gw.send(token, "hello")
        await gw.send(token, "/status")
        after = await _samples(gw)

    assert _get(before, "parley_inbound_messages_total", channel="webchat") == 0
    assert _get(after, "parley_inbound_messages_total", channel="webchat") == 2
    assert _get(after, "parley_turns_total", answer="model") == 1
    assert _get(after, "parley_turns_total", answer="command") == 1
    assert _get(after, "parley_turn_seconds_count") == 1
    assert _get(after, "parley_model_seconds_count") == 1
    assert _get(after, "parley_live_window_tokens_count") == 1
    # As the model server counted them (the fake: 10 uncached prompt tokens, a token a piece).
    assert _get(after, "parley_model_tokens_total", kind="prompt") == 16
    assert _get(after, "parley_model_tokens_total", kind="cached") == 6
    assert _get(after, "parley_model_tokens_total", kind="completion") == 2
    assert _get(after, "parley_turn_leases_held") == 0  # released once answered
    assert _get(after, "parley_archive_chunks", status="pending") == 0
    assert _get(after, "parley_archive_lag_seconds") == 0
    assert _get(after, "parley_delivery_parts_in_doubt") == 0


async def test_delivered_parts_are_counted_by_channel_and_outcome(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Reply("x" * 5_000))  # two parts on Telegram
    async with platform_gateway(database_url, tmp_path, llm) as p:
        p.tg.fail("sendMessage", None, flood(retry_after=1))  # the second part is throttled
        await p.telegram(tg.text_update(CHAT, "tell me a lot"))
        await eventually(p.all_messages, until=lambda ms: ms[-1]["delivery"] == "sent")
        samples = await _samples(p.gw)

    assert _get(samples, "parley_delivery_parts_total", channel="telegram", outcome="sent") == 2
    assert _get(samples, "parley_delivery_parts_total", channel="telegram", outcome="retried") == 1
    assert _get(samples, "parley_inbound_messages_total", channel="telegram") == 1


async def test_each_gateway_counts_its_own(database_url: str, tmp_path: Path, llm: FakeLLM) -> None:
    async with (
        running_gateway(make_settings(database_url, tmp_path / "a", llm)) as a,
        running_gateway(make_settings(database_url, tmp_path / "b", llm)) as b,
    ):
        token, _ = await a.visitor()
        await a.send(token, "only to a")
        on_a, on_b = await _samples(a), await _samples(b)

    assert _get(on_a, "parley_inbound_messages_total", channel="webchat") == 1
    assert _get(on_b, "parley_inbound_messages_total", channel="webchat") == 0


async def test_garbage_collections_are_timed_while_the_gateway_runs(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path / "a", llm)) as gw:
        before = await _samples(gw)
        gc.collect()
        after = await _samples(gw)
        watching = len(gc.callbacks)
    stopped = len(gc.callbacks)

    full = "parley_gc_pause_seconds_count"
    assert _get(after, full, generation="2") >= _get(before, full, generation="2") + 1
    assert _get(after, "parley_gc_pause_seconds_sum", generation="2") > _get(
        before, "parley_gc_pause_seconds_sum", generation="2"
    )
    assert _get(after, "parley_gc_pause_seconds_bucket", generation="2", le="+Inf") == _get(
        after, full, generation="2"
    )
    # The gateway's callback goes with it: a stopped app is not called by every collection.
    assert stopped == watching - 1
