"""What a turn's later calls carry of its tool rounds, within the room the prompt left
them: older rounds give way to newer ones, the newest always reaches the model (cut to
fit, and saying so, if it must be), and a small model's answers are sized to its room."""

from __future__ import annotations

from gateway.llm.base import ToolCall, ToolStep
from gateway.turns.steps import (
    DROPPED,
    SHORTENED,
    answer_tokens,
    fit_steps,
    steps_tokens,
    tool_room,
)
from memory.recall import ANSWER_TOKENS, SOURCE, answer


def _round(number: int, *sizes: int) -> ToolStep:
    """A round of calls whose answers are about `sizes` tokens of numbered words."""
    calls = tuple(
        ToolCall(f"call_{number}_{i}", "archive_read", f'{{"chunk_id": {i + 1}}}')
        for i in range(len(sizes))
    )
    results = tuple(
        answer(" ".join(f"r{number}.{i}w{k}" for k in range(size // 3)))
        for i, size in enumerate(sizes)
    )
    return ToolStep("", calls, results)


def test_older_rounds_give_way_and_the_newest_arrives_whole() -> None:
    rounds = [_round(1, 800, 800), _round(2, 800, 800), _round(3, 800, 800)]
    room = steps_tokens(rounds[-1:]) + 100

    carried = fit_steps(rounds, room)

    assert steps_tokens(carried) <= room
    assert carried[-1] == rounds[-1]
    assert all(result == DROPPED for step in carried[:-1] for result in step.results)


def test_a_newest_round_larger_than_the_room_is_shortened_not_dropped() -> None:
    newest = _round(2, 1200, 1200, 40)
    room = 1100

    [carried] = fit_steps([_round(1, 800), newest], room)

    assert steps_tokens([carried]) <= room
    assert carried.calls == newest.calls
    long_one, other, short = carried.results
    assert short == newest.results[2]  # a short answer stays whole
    for cut, whole in ((long_one, newest.results[0]), (other, newest.results[1])):
        assert cut.startswith(f"{SOURCE}\n")
        assert cut.endswith(f"…\n{SHORTENED}")
        kept = cut.removeprefix(f"{SOURCE}\n").removesuffix(f"…\n{SHORTENED}")
        assert whole.startswith(f"{SOURCE}\n{kept} ")  # its start, cut after a word
        assert len(kept) > 1000  # a fair share of the room each, not a scrap


def test_a_small_models_answers_are_sized_so_a_round_of_two_fits() -> None:
    large = tool_room(128_000 - 2_048, 6)
    small = tool_room(8_000 - 2_048, 6)

    assert answer_tokens(large) == ANSWER_TOKENS
    assert answer_tokens(small) < ANSWER_TOKENS
    assert 2 * (answer_tokens(small) + 100) <= small
