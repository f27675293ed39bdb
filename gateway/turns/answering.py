"""A turn's answer from the model: the prompt built once, the recall tools it calls run
and their rounds carried, and only the final answer streamed to the turn's clients.

The system prompt is the same bytes on every call of a turn (provider prompt caches
hold); what grows is the rounds, within the room the prompt kept for them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from gateway.clock import Clock
from gateway.errors import LLMError
from gateway.events.hub import DeltaEvent, Hub, Typing
from gateway.llm import LLMProvider, Prompt
from gateway.llm.base import ChatTurn, ImagePart, Tool, ToolCall, ToolStep, Usage
from gateway.llm.fallback import asked_of, models_of
from gateway.llm.offline import OFFLINE
from gateway.metrics import Metrics
from gateway.text import clean
from gateway.turns.live_window import KeptRenderings
from gateway.turns.presence import NO_PREVIEW, Preview
from gateway.turns.steps import (
    answer_tokens,
    as_turns,
    fit_steps,
    steps_tokens,
    tool_room,
    tools_tokens,
)
from memory.archive.reads import ChunkView
from memory.context import LiveRendering, clock_context, render_timeline, system_prompt
from memory.provenance import NOTICE_SOURCE, is_firing
from memory.recall import Scope
from memory.storage.attachments import StoredImage
from memory.storage.conversations import Conversations, TurnState
from memory.storage.lookups import NewLookup
from memory.storage.messages import StoredMessage
from memory.storage.models import Role
from memory.token_count import message_tokens

log = structlog.get_logger(__name__)

# Held while the model is asked (`TurnSlots`: the turn's slot is lent meanwhile).
Waiting = Callable[[], AbstractAsyncContextManager[None]]

MODEL_DOWN_NOTICE = (
    "Sorry — I couldn't reach the language model just now, so I can't answer yet. "
    "Your message is saved; write again in a moment and I'll pick up from here."
)
# Text of a call that may turn to the tools is streamed once it is this long (or the
# reply ends without a call): a preamble before a call is a sentence or two ("Let me
# look that up."), an answer soon outgrows that.
ANSWER_CHARS = 160
# A model that failed while a later one answered is passed over for this long: turns
# meanwhile go straight to the one that works, not through the failing one's retries.
MODEL_REST = timedelta(seconds=30)
TOOL_LIMIT_NOTICE = (
    "Sorry — I kept searching my archive and didn't get to an answer. "
    "Ask me again, perhaps more precisely, and I'll try once more."
)


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Read once at a turn's start: what the system prompt shows besides the clock."""

    timeline: tuple[ChunkView, ...] = ()
    profile: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnLimits:
    context_tokens: int
    max_reply_tokens: int
    # Recall tool calls a turn may make (0: no tools offered).
    max_tool_calls: int = 0
    # The live window's newest images a model that sees is shown (0: none).
    images_in_prompt: int = 0


class ImageSource(Protocol):
    async def images_of(self, message_ids: Sequence[int], limit: int) -> list[StoredImage]:
        """The newest `limit` images of the messages, newest first."""
        ...


class Recalling(Protocol):
    """The recall tools, and where the calls of a turn are kept."""

    tools: tuple[Tool, ...]
    guide: str  # for the system prompt: when to use them

    async def call(self, scope: Scope, call: ToolCall) -> NewLookup: ...

    async def record(
        self, conversation_id: uuid.UUID, message_id: int, lookups: list[NewLookup]
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    role: Role = Role.ASSISTANT
    source: str | None = None
    # A model's answer: its last call's prompt, estimated (the tools it declared too).
    prompt_tokens: int | None = None
    # The model that wrote it (the main one, or a fallback that took over).
    model: str | None = None
    # What each model call of the turn took, as the servers counted (a turn that ended
    # in a notice may have spent some too).
    usage: tuple[Usage, ...] = ()
    # Images the model was shown that have no description yet (one is written after).
    undescribed: tuple[int, ...] = ()


class Answerer:
    """Asks the model for the answer to a turn's messages."""

    def __init__(
        self,
        *,
        llm: LLMProvider,
        hub: Hub,
        clock: Clock,
        persona: str,
        limits: TurnLimits,
        conversations: Conversations,
        metrics: Metrics,
        recall: Recalling | None,
        images: ImageSource | None = None,
        renderings: KeptRenderings | None = None,
    ) -> None:
        self._llm = llm
        # The main model, then its fallbacks: a turn asks the next when one fails.
        self._models = models_of(llm)
        # When each model that failed may be asked again (by index in `_models`).
        self._resting: dict[int, datetime] = {}
        self._hub = hub
        self._clock = clock
        self._persona = persona
        self._limits = limits
        self._conversations = conversations
        self._metrics = metrics
        self._recall = recall if limits.max_tool_calls > 0 else None
        self._renderings = renderings if renderings is not None else KeptRenderings()
        shown = limits.images_in_prompt > 0 and llm.sees_images
        self._images = images if shown else None
        # What declaring the recall tools costs a prompt: the same every turn, and
        # counting it means writing out their schemas.
        self._declared: tuple[Sequence[Tool], int] = ((), 0)

    def forget(self, conversation_id: uuid.UUID) -> None:
        """Drop what is kept rendered of the conversation."""
        self._renderings.forget(conversation_id)

    def keeps(self, conversation_id: uuid.UUID) -> bool:
        return conversation_id in self._renderings

    async def answer(
        self,
        state: TurnState,
        context: TurnContext,
        trigger: StoredMessage,
        *,
        waiting: Waiting = contextlib.nullcontext,
        preview: Preview = NO_PREVIEW,
    ) -> Answer:
        """The answer to everything `state` holds unanswered, up to `trigger`; the model's
        calls run inside `waiting` (the turn's slot lent meanwhile)."""
        clock = clock_context(self._clock.now(), state.timezone, state.previous_at)
        window = self._limits.context_tokens - self._limits.max_reply_tokens
        # The tool rounds of the turn come after the live turns: room is kept for them
        # first. The timeline may use up to half of the rest; the live messages get what
        # it leaves.
        kept = 0 if self._recall is None else tool_room(window, self._limits.max_tool_calls)
        rows = render_timeline(context.timeline, state.timezone, budget=(window - kept) // 2)
        profile = "\n".join(f"- {line}" for line in context.profile)
        guide = None if self._recall is None else self._recall.guide
        persona = self._persona if guide is None else f"{self._persona}\n\n{guide}"
        system = system_prompt(persona, clock, rows, profile)
        tools = () if self._recall is None else self._recall.tools
        declared = self._declared_tokens(tools)
        budget = window - message_tokens(system) - declared - kept
        rendering = self._renderings.render(state)
        turns, turns_tokens = rendering.fit(budget)
        turns, images_tokens, undescribed = await self._with_images(
            rendering, turns, budget - turns_tokens
        )
        prompt = Prompt(system, tuple(turns), max_tokens=self._limits.max_reply_tokens, tools=tools)
        # The system and live turns' tokens, counted once: every call's prompt starts
        # with them.
        known = _Known(message_tokens(system) + turns_tokens + images_tokens, len(turns), declared)
        # What the live messages leave is the rounds' too (less than kept only when the
        # newest message alone outgrew its share).
        room = window - _size(prompt, known)
        # Reminders coming due are sent in their own words where no model writes them.
        fired = [m.text for m in state.unanswered if is_firing(m.source)]
        typed = len(fired) < len(state.unanswered)
        if fired and not typed and self._llm.name == OFFLINE:
            return Answer("\n\n".join(fired))
        spent: list[Usage] = []
        try:
            async with waiting():
                answer = await self._generate(state, prompt, known, room, trigger, preview, spent)
        except LLMError as exc:
            log.warning(
                "model unavailable", conversation_id=str(state.conversation_id), error=str(exc)
            )
            usage = tuple(spent)
            if fired:
                text = "\n\n".join(fired + ([MODEL_DOWN_NOTICE] if typed else []))
                return Answer(text, usage=usage)
            return Answer(MODEL_DOWN_NOTICE, Role.EVENT, NOTICE_SOURCE, usage=usage)
        if fired and self._llm.name == OFFLINE:
            return replace(answer, text="\n\n".join([*fired, answer.text]))
        return replace(answer, undescribed=undescribed)

    def _declared_tokens(self, tools: Sequence[Tool]) -> int:
        if tools is not self._declared[0]:
            self._declared = (tools, tools_tokens(tools))
        return self._declared[1]

    async def _with_images(
        self, rendering: LiveRendering, turns: list[ChatTurn], room: int
    ) -> tuple[list[ChatTurn], int, tuple[int, ...]]:
        """`turns` with the newest images of their messages shown (a model that sees),
        as many as `room` tokens hold; what those images cost, and which of them are
        not described yet."""
        media = rendering.with_media(len(turns)) if self._images is not None else []
        if not media or self._images is None:
            return turns, 0, ()
        index_of = {message_id: index for index, message_id in media}
        found = await self._images.images_of(list(index_of), self._limits.images_in_prompt)
        shown: dict[int, list[ImagePart]] = {}
        undescribed: list[int] = []
        spent = 0
        for image in found:  # newest first: the oldest are the ones left out
            cost = self._llm.image_tokens(image.width, image.height)
            if spent + cost > room:
                break
            spent += cost
            if not image.described:
                undescribed.append(image.id)
            part = ImagePart(image.mime, image.data, image.width, image.height)
            shown.setdefault(image.message_id, []).insert(0, part)
        turns = list(turns)
        for message_id, parts in shown.items():
            index = index_of[message_id]
            turns[index] = replace(turns[index], images=tuple(parts))
        return turns, spent, tuple(undescribed)

    async def _generate(
        self,
        state: TurnState,
        prompt: Prompt,
        known: _Known,
        room: int,
        trigger: StoredMessage,
        preview: Preview,
        spent: list[Usage],
    ) -> Answer:
        """Ask the model, run the recall tools it calls (up to the limit) and ask again
        with their answers, until it answers in text; each call's usage goes in `spent`. The prompt's system text is the
        same bytes on every call, and its turns too up to the last call at the limit,
        which has the rounds written out after them; only the steps grow, within `room`
        tokens, what the window leaves them."""
        steps: list[ToolStep] = []
        lookups: list[NewLookup] = []
        scope: Scope | None = None  # read once, at the turn's first call
        left = self._limits.max_tool_calls
        # Once a fallback has taken over, the rest of the turn stays with it.
        writer = 0
        try:
            while True:
                carried = fit_steps(steps, room)
                if steps and left <= 0:
                    # The last call: no tools declared at all, the rounds written out as
                    # text, so the model can only answer.
                    last = prompt.turns + as_turns(carried)
                    asked = replace(prompt, turns=last, tools=(), steps=())
                else:
                    asked = replace(prompt, steps=carried)
                text, calls, writer = await self._call_model(
                    state.conversation_id, asked, preview, writer, spent
                )
                if not calls or self._recall is None:
                    break
                if left <= 0:
                    # Offered no tools, the model (or its server) called some anyway.
                    if text:
                        break
                    return Answer(TOOL_LIMIT_NOTICE, Role.EVENT, NOTICE_SOURCE, usage=tuple(spent))
                scope = scope or await self._scope(state, answer_tokens(room))
                # Calls past the limit are not run, nor shown again: the next call,
                # the last, is told the lookups are used up.
                run = calls[:left]
                step = await self._run_tools(scope, run)
                lookups += step
                left -= len(step)
                steps.append(ToolStep(text, tuple(run), tuple(lookup.result for lookup in step)))
        finally:
            if lookups and self._recall is not None:
                await self._recall.record(state.conversation_id, trigger.id, lookups)
        if not text:
            raise LLMError("the model returned an empty reply")
        return Answer(
            text,
            prompt_tokens=_size(asked, known),
            model=self._models[writer].model,
            usage=tuple(spent),
        )

    async def _call_model(
        self,
        conversation_id: uuid.UUID,
        prompt: Prompt,
        preview: Preview,
        first: int,
        spent: list[Usage],
    ) -> tuple[str, list[ToolCall], int]:
        """The reply of the first model, from the `first`, that gives one whole (and
        which that was); `LLMError` if none does. What a model that failed part-way
        showed is withdrawn as the next one starts."""
        failure: LLMError | None = None
        order = self._order(first)
        for position, index in enumerate(order):
            model = self._models[index]
            try:
                text, calls = await self._stream(
                    conversation_id, asked_of(prompt, index), preview, model, spent
                )
            except LLMError as exc:
                failure = exc
                if position + 1 < len(order):
                    log.warning(
                        "a model failed; the next one answers", model=model.model, error=str(exc)
                    )
                    self._metrics.model_fallbacks.labels(model.model).inc()
                    self._resting[index] = self._clock.now() + MODEL_REST
                continue
            self._resting.pop(index, None)
            return text, calls, index
        assert failure is not None
        raise failure

    def _order(self, first: int) -> list[int]:
        """The models to ask, from the `first`: those resting after a failure come last
        (asked only if every other fails too)."""
        now = self._clock.now()
        indexes = range(first, len(self._models))
        ready = [i for i in indexes if self._resting.get(i, now) <= now]
        return ready + [i for i in indexes if i not in ready]

    async def _stream(
        self,
        conversation_id: uuid.UUID,
        prompt: Prompt,
        preview: Preview,
        model: LLMProvider,
        spent: list[Usage],
    ) -> tuple[str, list[ToolCall]]:
        pieces: list[str] = []
        calls: list[ToolCall] = []
        # A call that may turn to the tools holds its text back until it is clearly an
        # answer (or the reply ends in text): what a model writes before its calls is
        # a preamble, no part of the answer, and the person should not see it.
        held: list[str] | None = [] if prompt.tools else None
        # Before every call: clients show that a reply is coming, and drop what an
        # earlier call of the turn streamed before it turned to the tools (a preamble
        # long enough to pass for an answer).
        self._hub.publish(conversation_id, Typing(conversation_id))
        preview.restart()
        with self._metrics.model_seconds.time():
            async for piece in model.stream(prompt):
                if isinstance(piece, ToolCall):
                    calls.append(piece)
                    continue
                if isinstance(piece, Usage):
                    spent.append(piece)
                    continue
                pieces.append(piece)
                # A model server can send what no database stores (NUL, a lone surrogate).
                shown = clean(piece)
                if held is not None:
                    held.append(shown)
                    if sum(map(len, held)) < ANSWER_CHARS:
                        continue
                    shown, held = "".join(held), None
                self._publish_delta(conversation_id, shown, preview)
        if held and not calls:  # short, and no tool call came: the answer after all
            self._publish_delta(conversation_id, "".join(held), preview)
        return clean("".join(pieces)).strip(), calls

    def _publish_delta(self, conversation_id: uuid.UUID, text: str, preview: Preview) -> None:
        if text:
            self._hub.publish(conversation_id, DeltaEvent(conversation_id, text))
            preview.add(text)

    async def _scope(self, state: TurnState, answer_tokens: int) -> Scope:
        """What the turn's tools may read: its conversation, and (personal) its person;
        each answer at most `answer_tokens`."""
        owner = (
            None if state.group else await self._conversations.personal_owner(state.conversation_id)
        )
        return Scope(state.conversation_id, owner, state.timezone, answer_tokens)

    async def _run_tools(self, scope: Scope, calls: list[ToolCall]) -> list[NewLookup]:
        assert self._recall is not None
        done = []
        for call in calls:
            done.append(await self._recall.call(scope, call))
            known = any(tool.name == call.name for tool in self._recall.tools)
            self._metrics.lookups.labels(call.name if known else "unknown").inc()
        return done


@dataclass(frozen=True, slots=True)
class _Known:
    """The tokens of a turn's system prompt and of its first `turns` turns, which
    every call's prompt of the turn starts with."""

    tokens: int
    turns: int
    declared: int  # what declaring the turn's tools costs, where a call declares them


def _size(prompt: Prompt, known: _Known) -> int:
    """About how many tokens a call's prompt is: system, turns, the tools it declares
    and its tool steps (what `known` counts is not counted again)."""
    later = prompt.turns[known.turns :]
    return (
        known.tokens
        + sum(message_tokens(turn.content) for turn in later)
        + (known.declared if prompt.tools else 0)
        + steps_tokens(prompt.steps)
    )
