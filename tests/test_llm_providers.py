"""The HTTP providers against a fake model server on a real socket, and the offline one."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from gateway.calls_out import env_proxy
from gateway.errors import LLMUnavailable
from gateway.llm import ChatTurn, LLMProvider, Prompt, build_provider, complete
from gateway.llm.anthropic import OPENING_TURN, anthropic_image_tokens, anthropic_messages
from gateway.llm.base import Usage
from gateway.llm.http import DRAIN_SECONDS, MAX_WAIT_SECONDS, TAIL_SECONDS, RetryPolicy
from gateway.llm.offline import OfflineProvider
from gateway.llm.openai import OpenAIProvider, openai_image_tokens
from gateway.settings import LLMProviderName, Settings
from memory.chat_turn import ImagePart
from tests.fakes.llm_server import Fail, FailMidStream, FakeLLM, Hang, Reply, fake_llm
from tests.support.providers import KEY, Kind, provider

PROMPT = Prompt(
    system="You are Parley.",
    turns=(
        ChatTurn("user", "hello"),
        ChatTurn("assistant", "hi"),
        ChatTurn("user", "how are you?"),
    ),
    max_tokens=64,
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with fake_llm() as server:
        yield server


async def test_openai_streams_the_pieces_in_order(fake: FakeLLM) -> None:
    fake.script(Reply("Hello world", pieces=3))
    async with provider("openai", fake) as llm:
        pieces = [piece async for piece in llm.stream(PROMPT)]
    # The call's usage comes last, naming the model asked.
    assert pieces == ["Hell", "o wo", "rld", Usage(10, 0, 3, model="fake-model")]


async def test_openai_request_puts_the_system_prompt_first(fake: FakeLLM) -> None:
    async with provider("openai", fake) as llm:
        await complete(llm, PROMPT)
    assert fake.requests == [
        {
            "model": "fake-model",
            "messages": [
                {"role": "system", "content": "You are Parley."},
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "how are you?"},
            ],
            "max_tokens": 64,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ]
    assert fake.headers[0]["authorization"] == f"Bearer {KEY}"


async def test_openai_sends_no_auth_header_without_a_key(fake: FakeLLM) -> None:
    async with provider("openai", fake, api_key=None) as llm:
        assert await complete(llm, PROMPT) == "reply 1"
    assert "authorization" not in fake.headers[0]


async def test_prompt_model_overrides_the_configured_one(fake: FakeLLM) -> None:
    prompt = Prompt(system="s", turns=(ChatTurn("user", "x"),), max_tokens=8, model="summary")
    async with provider("openai", fake) as openai, provider("anthropic", fake) as anthropic:
        await complete(openai, prompt)
        await complete(anthropic, prompt)
    assert [body["model"] for body in fake.requests] == ["summary", "summary"]


async def test_anthropic_streams_the_pieces_in_order(fake: FakeLLM) -> None:
    fake.script(Reply("Bonjour tout le monde", pieces=4))
    async with provider("anthropic", fake) as llm:
        *pieces, usage = [piece async for piece in llm.stream(PROMPT)]
    assert "".join(map(str, pieces)) == "Bonjour tout le monde"
    assert len(pieces) == 4
    assert isinstance(usage, Usage)
    assert usage.model == "fake-model"


async def test_anthropic_request_shape(fake: FakeLLM) -> None:
    async with provider("anthropic", fake) as llm:
        await complete(llm, PROMPT)
    assert fake.requests == [
        {
            "model": "fake-model",
            "max_tokens": 64,
            "system": [
                {
                    "type": "text",
                    "text": "You are Parley.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
            "messages": [
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "how are you?"},
            ],
            "stream": True,
        }
    ]
    assert fake.headers[0]["x-api-key"] == KEY
    assert fake.headers[0]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in fake.headers[0]


def test_anthropic_messages_alternate_and_open_with_the_user() -> None:
    turns = (
        ChatTurn("assistant", "a1"),
        ChatTurn("assistant", "a2"),
        ChatTurn("user", "u1"),
        ChatTurn("user", "u2"),
    )
    assert anthropic_messages(turns) == [
        {"role": "user", "content": OPENING_TURN},
        {"role": "assistant", "content": "a1\n\na2"},
        {"role": "user", "content": "u1\n\nu2"},
    ]


def test_anthropic_images_go_as_base64_blocks_before_their_words() -> None:
    photo = ImagePart("image/jpeg", b"\xff\xd8jpeg", 800, 600)
    turns = (
        ChatTurn("user", "first"),
        ChatTurn("user", "look\n[image 800×600, not described]", images=(photo,)),
        ChatTurn("user", "", images=(photo,)),  # a photo sent without words
    )
    block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9hqcGVn"},
    }

    assert anthropic_messages(turns, images=True) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "first"},
                block,
                {"type": "text", "text": "look\n[image 800×600, not described]"},
                block,
            ],
        }
    ]
    # A model that does not see gets the words only.
    assert anthropic_messages(turns) == [
        {"role": "user", "content": "first\n\nlook\n[image 800×600, not described]"}
    ]


def test_image_tokens_follow_each_providers_own_count() -> None:
    # OpenAI's published examples: 1024² is 4 tiles, 2048×4096 is fitted to 768×1536.
    assert openai_image_tokens(1024, 1024) == 765
    assert openai_image_tokens(2048, 4096) == 1105
    assert openai_image_tokens(100, 100) == 255
    # Anthropic: pixels / 750, and no image costs more than about 1,600.
    assert anthropic_image_tokens(1000, 1000) == 1334
    assert anthropic_image_tokens(1568, 1176) == 1600


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_each_call_reports_the_tokens_the_server_counted(fake: FakeLLM, kind: Kind) -> None:
    fake.script(Reply("counted reply", pieces=3, cached=4))
    heard: list[Usage] = []
    async with provider(kind, fake, on_usage=heard.append) as llm:
        assert await complete(llm, PROMPT) == "counted reply"

    # The fake counts 10 prompt tokens besides the cached ones, a token per piece.
    assert heard == [Usage(prompt=14, cached=4, completion=3, model="fake-model")]


async def test_a_stream_held_open_after_its_end_still_answers(fake: FakeLLM) -> None:
    # Usage comes after the finishing chunk; a server that sends neither it nor
    # `[DONE]` and keeps the connection open costs a short wait, not the reply.
    fake.script(Reply("whole already", hold_open=True))
    heard: list[Usage] = []
    async with provider("openai", fake, on_usage=heard.append, read_timeout=60) as llm:
        async with asyncio.timeout(TAIL_SECONDS + 5):
            assert await complete(llm, PROMPT) == "whole already"

    assert heard == []
    assert len(fake.requests) == 1


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_calls_one_after_another_share_one_connection(fake: FakeLLM, kind: Kind) -> None:
    # A response not read to its end is closed, and the next call pays for a new
    # connection: with a real model, a TLS handshake every turn. The reply is whole, and
    # its usage read, before the stream's last bytes.
    heard: list[Usage] = []
    async with provider(kind, fake, on_usage=heard.append) as llm:
        for _ in range(3):
            assert (await complete(llm, PROMPT)).startswith("reply")

    assert len(fake.requests) == 3
    assert len(heard) == 3
    assert len(fake.connections) == 1


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_body_held_open_after_the_end_marker_costs_a_moment(
    fake: FakeLLM, kind: Kind
) -> None:
    # Reading on for the body's end must not hold the turn: after a short wait the
    # connection is given up, and the next call takes a new one.
    fake.script(Reply("held", hold_after_end=True), Reply("next"))
    heard: list[Usage] = []
    async with provider(kind, fake, on_usage=heard.append, read_timeout=60) as llm:
        # Well under the wait for a usage that may still come.
        assert DRAIN_SECONDS < TAIL_SECONDS / 4
        async with asyncio.timeout(TAIL_SECONDS * 0.75):
            assert await complete(llm, PROMPT) == "held"
        assert await complete(llm, PROMPT) == "next"

    assert len(heard) == 2
    assert len(fake.connections) == 2


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_server_error_is_retried_with_the_same_body(fake: FakeLLM, kind: Kind) -> None:
    fake.script(Fail(500), Reply("recovered"))
    async with provider(kind, fake) as llm:
        assert await complete(llm, PROMPT) == "recovered"
    assert len(fake.requests) == 2
    assert fake.requests[0] == fake.requests[1]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_retry_after_is_used_instead_of_backoff(fake: FakeLLM, kind: Kind) -> None:
    fake.script(Fail(429, retry_after=0.01), Reply("ok"))
    # Backoff from a 30 s base would wait far longer than the deadline below.
    async with provider(kind, fake, retry_base_seconds=30.0) as llm, asyncio.timeout(5):
        assert await complete(llm, PROMPT) == "ok"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_spent_retries_raise_unavailable(fake: FakeLLM, kind: Kind) -> None:
    fake.script(Fail(503, message="down"), Fail(529), Fail(502))
    async with provider(kind, fake, max_retries=2) as llm:
        with pytest.raises(LLMUnavailable) as caught:
            await complete(llm, PROMPT)
    assert caught.value.attempts == 3
    assert "502" in caught.value.reason
    assert len(fake.requests) == 3


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_silent_server_times_out(fake: FakeLLM, kind: Kind) -> None:
    fake.script(Hang(), Hang())
    async with provider(kind, fake, read_timeout=0.3, max_retries=1) as llm:
        with pytest.raises(LLMUnavailable) as caught:
            await complete(llm, PROMPT)
    assert caught.value.attempts == 2
    assert "timed out" in caught.value.reason


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_refused_connections_are_retried(fake: FakeLLM, kind: Kind) -> None:
    # A bound socket that never listens refuses every connection.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{closed.getsockname()[1]}"
        async with provider(kind, fake, base_url=base, max_retries=1) as llm:
            with pytest.raises(LLMUnavailable) as caught:
                await complete(llm, PROMPT)
    assert caught.value.attempts == 2
    assert "could not connect" in caught.value.reason


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_not_retried(fake: FakeLLM, kind: Kind, status: int) -> None:
    fake.script(Fail(status, message=f"invalid x-api-key {KEY}"))
    async with provider(kind, fake, max_retries=3) as llm:
        with pytest.raises(LLMUnavailable) as caught:
            await complete(llm, PROMPT)
    assert caught.value.attempts == 1
    assert len(fake.requests) == 1
    assert f"HTTP {status}" in caught.value.reason
    assert "invalid x-api-key" in caught.value.reason
    assert KEY not in str(caught.value)
    assert KEY not in repr(caught.value)


async def test_long_error_messages_are_clipped(fake: FakeLLM) -> None:
    fake.script(Fail(400, message="x" * 5000))
    async with provider("openai", fake) as llm:
        with pytest.raises(LLMUnavailable) as caught:
            await complete(llm, PROMPT)
    assert len(caught.value.reason) < 300


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_an_error_after_text_ends_the_stream_without_retry(fake: FakeLLM, kind: Kind) -> None:
    fake.script(FailMidStream("partial answer"))
    received: list[str] = []

    async def read_all(llm: LLMProvider) -> None:
        async for piece in llm.stream(PROMPT):
            received.append(str(piece))

    async with provider(kind, fake, max_retries=3) as llm:
        with pytest.raises(LLMUnavailable) as caught:
            await read_all(llm)
    assert received == ["partial answer"]
    assert caught.value.attempts == 1
    assert "broke off" in caught.value.reason
    assert len(fake.requests) == 1


async def test_an_overload_event_before_any_text_is_retried(fake: FakeLLM) -> None:
    fake.script(FailMidStream(""), Reply("second try"))
    async with provider("anthropic", fake) as llm:
        assert await complete(llm, PROMPT) == "second try"
    assert len(fake.requests) == 2


async def test_fake_counts_overlapping_requests(fake: FakeLLM) -> None:
    gate = asyncio.Event()
    fake.script(Reply("a", gate=gate), Reply("b", gate=gate))
    async with provider("openai", fake) as llm:
        calls = [asyncio.create_task(complete(llm, PROMPT)) for _ in range(2)]
        await fake.wait_for_requests(2)
        assert fake.active == 2
        gate.set()
        assert sorted(await asyncio.gather(*calls)) == ["a", "b"]
    assert fake.active == 0
    assert fake.max_active == 2


def test_retry_after_is_capped() -> None:
    assert RetryPolicy(3, 1.0).delay(0, retry_after=3600) == MAX_WAIT_SECONDS


def test_backoff_doubles_with_full_jitter() -> None:
    policy = RetryPolicy(5, 1.0)
    for attempt in range(4):
        waits = [policy.delay(attempt, retry_after=None) for _ in range(200)]
        assert all(0 <= wait <= 2**attempt for wait in waits)
        assert max(waits) > 2**attempt / 2  # spread over the whole range, not pinned low


async def test_build_provider_follows_the_settings(fake: FakeLLM) -> None:
    settings = Settings(
        llm_provider=LLMProviderName.OPENAI,
        llm_base_url=fake.openai_base,
        llm_api_key=SecretStr(KEY),
        llm_model="configured",
        _env_file=None,
    )
    llm = build_provider(settings)
    try:
        assert isinstance(llm, OpenAIProvider)
        assert await complete(llm, PROMPT) == "reply 1"
    finally:
        await llm.aclose()
    assert fake.requests[0]["model"] == "configured"
    assert llm.offers_tools
    offline = build_provider(Settings(_env_file=None))
    assert isinstance(offline, OfflineProvider)
    assert not offline.offers_tools


async def test_offline_provider_is_honest_and_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("the offline provider opened a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    llm = build_provider(Settings(llm_provider=LLMProviderName.OFFLINE, _env_file=None))
    pieces = [str(piece) async for piece in llm.stream(PROMPT)]
    await llm.aclose()

    reply = "".join(pieces)
    assert len(pieces) > 1
    assert "No language model is configured" in reply
    assert "stored" in reply
    assert "2 user messages" in reply
    for setting in ("PARLEY_LLM_PROVIDER", "PARLEY_LLM_BASE_URL", "PARLEY_LLM_API_KEY"):
        assert setting in reply
    assert "PARLEY_LLM_MODEL" in reply
    assert "how are you" not in reply  # it never pretends to have read the message
    assert await complete(llm, PROMPT) == reply


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_calls_go_through_the_proxy_the_environment_names(
    fake: FakeLLM, kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model's host does not resolve: only the proxy (the fake, which takes the
    # absolute-form request as its own) can have answered.
    monkeypatch.setenv("HTTP_PROXY", fake.base_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    base = "http://model.invalid/v1" if kind == "openai" else "http://model.invalid"
    fake.script(Reply("through the proxy"))
    async with provider(kind, fake, base_url=base, max_retries=0) as llm:
        assert await complete(llm, PROMPT) == "through the proxy"
    assert len(fake.requests) == 1


def test_no_proxy_exempts_a_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "models.internal")
    assert env_proxy("https://api.example.com/v1") == "http://proxy.example:3128"
    assert env_proxy("https://models.internal/v1") is None
    assert env_proxy("http://api.example.com/v1") is None  # no HTTP_PROXY set
    assert env_proxy("http://[::1") is None  # not a URL: no proxy, the call says why
