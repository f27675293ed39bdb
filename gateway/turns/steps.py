"""How much of a turn's tool rounds its prompt can carry.

A turn's prompt is sized once, at its start: room for the tool rounds comes first
(`tool_room`), the timeline and the live turns share the rest, and whatever the live
turns leave is the rounds' too. The tools' answers are sized to that room
(`answer_tokens`), so a round of a couple of calls fits it whole even on a small model.
Each later call carries the rounds made so far; when they no longer fit, the older
rounds give way, their results first (the model has read them, and is told it may ask
again), then the rounds themselves. The newest round always stays, its results
shortened if they must be: the model has not read them yet. So no call's prompt
outgrows the model's window. The last call, at the limit of calls, has the rounds
written out as turns instead (`as_turns`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from gateway.llm.base import ChatTurn, Tool, ToolCall, ToolStep
from gateway.turns.tools import MAX_ARGUMENT_CHARS
from memory.escaping import escape_typed
from memory.provenance import NOTICE_SOURCE, label
from memory.recall import ANSWER_TOKENS, SOURCE, answer
from memory.token_count import estimate_tokens, message_tokens, shares, shorten

# What one call may add: its answer, and the call as the model wrote it.
CALL_OVERHEAD_TOKENS = 100
CALL_TOKENS = ANSWER_TOKENS + CALL_OVERHEAD_TOKENS
# A turn's answers are sized so that a round of this many calls fits its room whole.
ROUND_CALLS = 2
MIN_ANSWER_TOKENS = 300
# What a round keeps of the model's own words before its calls (a preamble, never shown
# to the person); of each call's arguments it keeps MAX_ARGUMENT_CHARS.
STEP_TEXT_CHARS = 1000
# What a wire format adds around a tool or a call (its keys, type and id).
WIRE_TOKENS = 24
DROPPED = answer(
    "(This result was left out to make room for later ones; make the call again if you "
    "still need it.)"
)
SHORTENED = "(The rest was cut to fit; ask for less at a time to read it.)"
USED_UP = "This turn's lookups are used up: answer now, from what they found and what you know."


def tool_room(window: int, max_calls: int) -> int:
    """Tokens a turn keeps free for its tool rounds: all of them where the window allows,
    else a third of it (older results then give way to newer ones)."""
    return min(max_calls * CALL_TOKENS, window // 3)


def answer_tokens(room: int) -> int:
    """What one tool answer may cost, with `room` for the turn's rounds: ANSWER_TOKENS,
    or on a small model less, so that a round of ROUND_CALLS calls still fits."""
    share = room // ROUND_CALLS - CALL_OVERHEAD_TOKENS
    return max(MIN_ANSWER_TOKENS, min(ANSWER_TOKENS, share))


def tools_tokens(tools: Sequence[Tool]) -> int:
    """About what declaring `tools` costs the prompt."""
    return sum(
        message_tokens(f"{tool.name} {tool.description} {json.dumps(dict(tool.parameters))}")
        + WIRE_TOKENS
        for tool in tools
    )


def steps_tokens(steps: Sequence[ToolStep]) -> int:
    """About what the rounds cost the prompt: the model's text and calls, and each result."""
    return sum(_step_tokens(step) for step in steps)


def fit_steps(steps: Sequence[ToolStep], room: int) -> tuple[ToolStep, ...]:
    """The rounds as the next call carries them, within `room` tokens: the model's text
    and arguments bounded, then the older rounds' results replaced by a note, oldest
    first, then the older rounds left out, until they fit; the newest round stays,
    its results shortened if even it alone does not fit."""
    fitted = [_bounded(step) for step in steps]
    for index in range(len(fitted) - 1):
        if steps_tokens(fitted) <= room:
            break
        step = fitted[index]
        fitted[index] = replace(step, results=tuple(DROPPED for _ in step.results))
    while len(fitted) > 1 and steps_tokens(fitted) > room:
        fitted.pop(0)
    if fitted and steps_tokens(fitted) > room:
        fitted[-1] = _shortened(fitted[-1], room)
    return tuple(fitted)


def as_turns(steps: Sequence[ToolStep]) -> tuple[ChatTurn, ...]:
    """The rounds written out as turns, for a last call that declares no tools (a
    provider refuses tool blocks without them, and some servers let a model call tools
    it was told not to): each round's own text as the assistant's, then what its calls
    returned behind the archive's source line; last, that the lookups are used up."""
    turns: list[ChatTurn] = []
    for step in steps:
        if step.text.strip():
            turns.append(ChatTurn("assistant", step.text))
        found = [
            f"What {call.name} {escape_typed(call.arguments)} returned:\n{_body(result)}"
            for call, result in zip(step.calls, step.results, strict=True)
        ]
        turns.append(ChatTurn("user", "\n\n".join([SOURCE, *found])))
    turns.append(ChatTurn("user", label(USED_UP, source=NOTICE_SOURCE)))
    return tuple(turns)


def _body(result: str) -> str:
    """A tool's answer without its source line: the turn it goes in has one."""
    return result.removeprefix(f"{SOURCE}\n")


def _shortened(step: ToolStep, room: int) -> ToolStep:
    """`step` with its results sharing what `room` leaves beside its calls: a short one
    whole, the longer ones cut, each saying so."""
    bare = _step_tokens(replace(step, results=tuple("" for _ in step.results)))
    given = shares([estimate_tokens(result) for result in step.results], room - bare)
    cut = tuple(
        _shorten(result, tokens) for result, tokens in zip(step.results, given, strict=True)
    )
    return replace(step, results=cut)


def _shorten(result: str, tokens: int) -> str:
    if estimate_tokens(result) <= tokens:
        return result
    # The source line and the note stay whatever the room: without them the cut text
    # would pass for the whole answer, or for no tool's.
    kept = shorten(_body(result), tokens - estimate_tokens(answer(f"\n{SHORTENED}")))
    return answer(f"{kept}\n{SHORTENED}" if kept else SHORTENED)


def _step_tokens(step: ToolStep) -> int:
    texts = [step.text, *(f"{c.id} {c.name} {c.arguments}" for c in step.calls), *step.results]
    return sum(message_tokens(text) for text in texts) + WIRE_TOKENS * len(step.calls)


def _bounded(step: ToolStep) -> ToolStep:
    return ToolStep(
        _clip(step.text, STEP_TEXT_CHARS),
        tuple(_bounded_call(call) for call in step.calls),
        step.results,
    )


def _bounded_call(call: ToolCall) -> ToolCall:
    return replace(call, arguments=_clip(call.arguments, MAX_ARGUMENT_CHARS))


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + "…"
