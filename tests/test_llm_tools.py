"""Tool calling in the HTTP providers, against the fake model server on a real socket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.errors import LLMUnavailable
from gateway.llm import ChatTurn, LLMProvider, Piece, Prompt, Tool, ToolCall, ToolStep
from gateway.llm.anthropic import anthropic_messages, with_steps
from gateway.llm.base import MAX_NAME_CHARS, Usage
from gateway.llm.offline import OfflineProvider
from tests.fakes.llm_server import Behaviour, CallTools, FakeLLM, Reply, fake_llm
from tests.support.providers import Kind, provider

KINDS = pytest.mark.parametrize("kind", ["openai", "anthropic"])
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = Tool("get_weather", "The weather in a city now.", CITY)
CLOCK = Tool("now", "The time now.", {"type": "object", "properties": {}})
QUESTION = ChatTurn("user", "What is the weather in Paris and Rome?")
PROMPT = Prompt(system="You are Parley.", turns=(QUESTION,), max_tokens=64, tools=(WEATHER, CLOCK))
PARIS = ToolCall("call_a", "get_weather", '{"city": "Paris"}')
ROME = ToolCall("call_b", "get_weather", '{"city": "Rome"}')
TWO_CALLS = ToolStep("", (PARIS, ROME), ("18 C, sunny", "12 C, rain"))


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with fake_llm() as server:
        yield server


async def stream_all(kind: Kind, fake: FakeLLM, prompt: Prompt = PROMPT) -> list[Piece]:
    """The text and calls of a reply (its usage, which comes last, has tests of its own)."""
    async with provider(kind, fake) as llm:
        return [piece async for piece in llm.stream(prompt) if not isinstance(piece, Usage)]


@KINDS
async def test_tool_definitions_reach_the_server_in_its_shape(fake: FakeLLM, kind: Kind) -> None:
    await stream_all(kind, fake)

    body = fake.requests[0]
    if kind == "openai":
        assert body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "The weather in a city now.",
                    "parameters": CITY,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "now",
                    "description": "The time now.",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ]
    else:
        assert body["tools"] == [
            {
                "name": "get_weather",
                "description": "The weather in a city now.",
                "input_schema": CITY,
            },
            {
                "name": "now",
                "description": "The time now.",
                "input_schema": {"type": "object", "properties": {}},
            },
        ]
    assert "tool_choice" not in body  # the model may call them: the default choice


@KINDS
async def test_a_call_streamed_in_pieces_arrives_whole(fake: FakeLLM, kind: Kind) -> None:
    arguments = {"city": "Paris", "unit": "celsius"}
    fake.script(CallTools([("get_weather", arguments)], pieces=5))

    pieces = await stream_all(kind, fake)

    assert pieces == [ToolCall("call_1_0", "get_weather", json.dumps(arguments))]


@pytest.mark.parametrize(
    ("kind", "interleave"), [("openai", False), ("openai", True), ("anthropic", False)]
)
async def test_two_calls_at_once_arrive_in_order(
    fake: FakeLLM, kind: Kind, interleave: bool
) -> None:
    calls: list[tuple[str, dict[str, Any] | str]] = [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]
    fake.script(CallTools(calls, pieces=3, interleave=interleave))

    pieces = await stream_all(kind, fake)

    assert pieces == [
        ToolCall("call_1_0", "get_weather", '{"city": "Paris"}'),
        ToolCall("call_1_1", "get_weather", '{"city": "Rome"}'),
    ]


@KINDS
async def test_text_comes_first_then_the_calls(fake: FakeLLM, kind: Kind) -> None:
    fake.script(CallTools([("now", {})], text="Let me look that up.", pieces=3))

    pieces = await stream_all(kind, fake)

    assert pieces[:3] == ["Let me ", "look th", "at up."]
    assert pieces[3:] == [ToolCall("call_1_0", "now", "{}")]


@KINDS
async def test_empty_arguments_mean_an_empty_object(fake: FakeLLM, kind: Kind) -> None:
    fake.script(CallTools([("now", "")]))

    assert await stream_all(kind, fake) == [ToolCall("call_1_0", "now", "{}")]


@KINDS
async def test_invalid_arguments_arrive_verbatim(fake: FakeLLM, kind: Kind) -> None:
    fake.script(CallTools([("get_weather", '{"city": "Par')], pieces=2))

    assert await stream_all(kind, fake) == [ToolCall("call_1_0", "get_weather", '{"city": "Par')]


@KINDS
async def test_a_made_up_name_of_any_length_arrives_cut(fake: FakeLLM, kind: Kind) -> None:
    fake.script(CallTools([("archive_" + "x" * 5000, {})]))

    cut = ("archive_" + "x" * 5000)[:MAX_NAME_CHARS]
    assert await stream_all(kind, fake) == [ToolCall("call_1_0", cut, "{}")]


@KINDS
async def test_a_call_without_a_name_fails_without_retry(fake: FakeLLM, kind: Kind) -> None:
    fake.script(CallTools([("", {"city": "Paris"})]))

    with pytest.raises(LLMUnavailable) as caught:
        await stream_all(kind, fake)

    assert "without a name" in caught.value.reason
    assert caught.value.attempts == 1


@KINDS
async def test_a_prompt_without_tools_sends_the_body_it_always_did(
    fake: FakeLLM, kind: Kind
) -> None:
    plain = Prompt(system="s", turns=(QUESTION,), max_tokens=64)
    await stream_all(kind, fake, plain)

    [first] = fake.requests
    question = {"role": "user", "content": QUESTION.content}
    if kind == "openai":
        expected: dict[str, Any] = {
            "model": "fake-model",
            "messages": [{"role": "system", "content": "s"}, question],
            "max_tokens": 64,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    else:
        expected = {
            "model": "fake-model",
            "max_tokens": 64,
            "messages": [question],
            "stream": True,
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        }
    assert list(first.items()) == list(expected.items())  # the keys in the same order too


async def test_openai_renders_steps_as_calls_and_tool_messages(fake: FakeLLM) -> None:
    later = ToolStep("One more.", (ToolCall("call_c", "now", "{}"),), ("09:30",))
    await stream_all("openai", fake, _with(TWO_CALLS, later))

    assert fake.requests[0]["messages"][1:] == [
        {"role": "user", "content": QUESTION.content},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "18 C, sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "12 C, rain"},
        {
            "role": "assistant",
            "content": "One more.",
            "tool_calls": [
                {"id": "call_c", "type": "function", "function": {"name": "now", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_c", "content": "09:30"},
    ]


async def test_anthropic_renders_steps_as_tool_use_and_tool_result(fake: FakeLLM) -> None:
    later = ToolStep("One more.", (ToolCall("call_c", "now", "{}"),), ("09:30",))
    await stream_all("anthropic", fake, _with(TWO_CALLS, later))

    assert fake.requests[0]["messages"] == [
        {"role": "user", "content": QUESTION.content},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_a",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "call_b",
                    "name": "get_weather",
                    "input": {"city": "Rome"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "18 C, sunny"},
                {"type": "tool_result", "tool_use_id": "call_b", "content": "12 C, rain"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "One more."},
                {"type": "tool_use", "id": "call_c", "name": "now", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_c", "content": "09:30"}],
        },
    ]


@pytest.mark.parametrize("arguments", ['{"city": "Par', '["Paris"]', ""])
def test_anthropic_shows_arguments_that_are_no_object_as_no_input(arguments: str) -> None:
    step = ToolStep("", (ToolCall("call_x", "get_weather", arguments),), ("no such city",))

    messages = with_steps(anthropic_messages((QUESTION,)), (step,))

    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "call_x", "name": "get_weather", "input": {}}
    ]


def test_anthropic_steps_after_an_assistant_turn_join_it() -> None:
    # Roles must alternate: the calls continue the assistant's message, as turns would.
    turns = (QUESTION, ChatTurn("assistant", "Let me see."))

    messages = with_steps(anthropic_messages(turns), (TWO_CALLS,))

    assert [message["role"] for message in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][0] == {"type": "text", "text": "Let me see."}
    assert [block["id"] for block in messages[1]["content"][1:]] == ["call_a", "call_b"]
    assert [block["type"] for block in messages[2]["content"]] == ["tool_result"] * 2


@KINDS
async def test_the_model_answers_from_the_results_it_was_sent(fake: FakeLLM, kind: Kind) -> None:
    def weather_model(body: dict[str, Any], number: int) -> Behaviour:
        results = _tool_results(kind, body)
        if results:
            return Reply(f"Paris: {results[0]}")
        return CallTools([("get_weather", {"city": "Paris"})])

    fake.responder = weather_model
    async with provider(kind, fake) as llm:
        first = [piece async for piece in llm.stream(PROMPT)]
        calls = tuple(piece for piece in first if isinstance(piece, ToolCall))
        step = ToolStep("", calls, ("18 C, sunny",))
        second = [piece async for piece in llm.stream(_with(step))]

    assert calls == (ToolCall("call_1_0", "get_weather", '{"city": "Paris"}'),)
    assert "".join(piece for piece in second if isinstance(piece, str)) == "Paris: 18 C, sunny"


@KINDS
async def test_a_stream_cut_in_a_call_is_retried(fake: FakeLLM, kind: Kind) -> None:
    call: list[tuple[str, dict[str, Any] | str]] = [("get_weather", {"city": "Paris"})]
    fake.script(CallTools(call, break_off=True), CallTools(call))

    pieces = await stream_all(kind, fake)

    # Only the second, whole, attempt's call: the cut one was never yielded.
    assert pieces == [ToolCall("call_2_0", "get_weather", '{"city": "Paris"}')]
    assert len(fake.requests) == 2


@KINDS
async def test_a_stream_cut_in_a_call_after_text_fails(fake: FakeLLM, kind: Kind) -> None:
    fake.script(CallTools([("now", {"zone": "UTC"})], text="Checking.", break_off=True))
    received: list[Piece] = []

    async def read_all(llm: LLMProvider) -> None:
        async for piece in llm.stream(PROMPT):
            received.append(piece)

    async with provider(kind, fake, max_retries=3) as llm:
        with pytest.raises(LLMUnavailable) as caught:
            await read_all(llm)

    assert "".join(str(piece) for piece in received) == "Checking."
    assert all(isinstance(piece, str) for piece in received)
    assert "broke off" in caught.value.reason
    assert len(fake.requests) == 1


@KINDS
async def test_a_call_reports_its_usage(fake: FakeLLM, kind: Kind) -> None:
    fake.script(CallTools([("get_weather", {"city": "Paris"})], text="Sure.", pieces=2))
    heard: list[Usage] = []
    async with provider(kind, fake, on_usage=heard.append) as llm:
        pieces = [piece async for piece in llm.stream(PROMPT)]

    # The fake counts 10 prompt tokens and a token per piece: two of text, two of arguments.
    usage = Usage(prompt=10, cached=0, completion=4, model="fake-model")
    assert len(pieces) == 4  # two of text, one call, then the usage
    assert pieces[-1] == usage
    assert heard == [usage]


async def test_the_offline_provider_offers_no_tools_and_still_answers() -> None:
    llm = OfflineProvider()
    pieces = [piece async for piece in llm.stream(PROMPT)]  # tools declared
    assert not llm.offers_tools  # so a turn offers none
    after_a_step = [piece async for piece in llm.stream(_with(TWO_CALLS))]

    for reply in (pieces, after_a_step):
        assert reply
        assert all(isinstance(piece, str) for piece in reply)
        assert "No language model is configured" in "".join(str(p) for p in reply)


def _with(*steps: ToolStep) -> Prompt:
    return Prompt(
        system="You are Parley.", turns=(QUESTION,), max_tokens=64, tools=PROMPT.tools, steps=steps
    )


def _tool_results(kind: Kind, body: dict[str, Any]) -> list[str]:
    """The tool results a request carries, in either wire format."""
    messages: list[dict[str, Any]] = body["messages"]
    if kind == "openai":
        return [m["content"] for m in messages if m["role"] == "tool"]
    blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    return [b["content"] for b in blocks if b["type"] == "tool_result"]
