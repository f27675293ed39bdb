"""Turns: one at a time per conversation, coalescing messages that arrive meanwhile.

`request(conversation)` makes sure a loop is running for that conversation. The loop
runs a turn for everything unanswered, then looks again: messages that arrived during
a turn are answered together by the next one. What is unanswered is read from the
database, so a turn cut short by a crash is simply run again on the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from gateway.clock import Clock
from gateway.errors import LLMError
from gateway.llm import LLMProvider, Prompt
from gateway.llm.base import Tool, ToolCall, ToolStep
from gateway.metrics import Metrics
from gateway.tasks import finish_or_cancel
from gateway.text import clean
from gateway.turns.commands import COMMAND_SOURCE, Commands, Invocation
from gateway.turns.hub import DeltaEvent, Hub, Typing
from gateway.turns.leases import ConversationLeases
from gateway.turns.steps import (
    answer_tokens,
    as_turns,
    fit_steps,
    steps_tokens,
    tool_room,
    tools_tokens,
)
from memory.archive.reads import ChunkView
from memory.context import clock_context, fit_to_budget, render_live, render_timeline, system_prompt
from memory.provenance import NOTICE_SOURCE
from memory.recall import Scope
from memory.storage.conversations import Conversations, TurnState
from memory.storage.leases import Held, LeaseLost
from memory.storage.lookups import NewLookup
from memory.storage.messages import Messages, NewMessage, StoredMessage
from memory.storage.models import Delivery, Role
from memory.tokens import message_tokens

log = structlog.get_logger(__name__)

MODEL_DOWN_NOTICE = (
    "Sorry — I couldn't reach the language model just now, so I can't answer yet. "
    "Your message is saved; write again in a moment and I'll pick up from here."
)
# Text of a call that may turn to the tools is streamed once it is this long (or the
# reply ends without a call): a preamble before a call is a sentence or two ("Let me
# look that up."), an answer soon outgrows that.
ANSWER_CHARS = 160
TOOL_LIMIT_NOTICE = (
    "Sorry — I kept searching my archive and didn't get to an answer. "
    "Ask me again, perhaps more precisely, and I'll try once more."
)


class Outbox(Protocol):
    """Where replies go once stored."""

    def delivered_by_storing(self, channel: str) -> bool:
        """True where clients read stored messages (web chat): nothing to send."""
        ...

    async def deliver(self, reply: StoredMessage, trigger: StoredMessage) -> None:
        """Send a stored reply; `trigger` is the message that started the turn."""
        ...


# Held while the model writes an answer to a message (typing indicators).
Presence = Callable[[StoredMessage], AbstractAsyncContextManager[None]]


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Read once at a turn's start: what the system prompt shows besides the clock."""

    timeline: tuple[ChunkView, ...] = ()
    profile: tuple[str, ...] = ()


class TurnMemory(Protocol):
    """What the archive does around a turn."""

    async def before_turn(self, conversation_id: uuid.UUID) -> TurnContext:
        """Apply finished archive work; return the timeline rows and the profile."""
        ...

    async def after_turn(self, conversation_id: uuid.UUID, live_tokens: int) -> None:
        """Cut chunks if the live window (`live_tokens` after the reply) outgrew its
        limit; never waits for summaries."""
        ...


class NoMemory:
    async def before_turn(self, conversation_id: uuid.UUID) -> TurnContext:
        return TurnContext()

    async def after_turn(self, conversation_id: uuid.UUID, live_tokens: int) -> None:
        return None


@dataclass(frozen=True, slots=True)
class TurnLimits:
    context_tokens: int
    max_reply_tokens: int
    # Recall tool calls a turn may make (0: no tools offered).
    max_tool_calls: int = 0


class Recalling(Protocol):
    """The recall tools, and where the calls of a turn are kept."""

    tools: tuple[Tool, ...]
    guide: str  # for the system prompt: when to use them

    async def call(self, scope: Scope, call: ToolCall) -> NewLookup: ...

    async def record(
        self, conversation_id: uuid.UUID, message_id: int, lookups: list[NewLookup]
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class _Answer:
    text: str
    role: Role = Role.ASSISTANT
    source: str | None = None
    # A model's answer: its last call's prompt, estimated (the tools it declared too).
    prompt_tokens: int | None = None


class TurnRunner:
    def __init__(
        self,
        *,
        messages: Messages,
        conversations: Conversations,
        llm: LLMProvider,
        hub: Hub,
        clock: Clock,
        persona: str,
        limits: TurnLimits,
        outbox: Outbox,
        leases: ConversationLeases,
        commands: Commands | None = None,
        memory: TurnMemory | None = None,
        presence: Presence | None = None,
        metrics: Metrics | None = None,
        recall: Recalling | None = None,
    ) -> None:
        self._metrics = metrics or Metrics()
        self._messages = messages
        self._conversations = conversations
        self._llm = llm
        self._hub = hub
        self._clock = clock
        self._persona = persona
        self._limits = limits
        self._outbox = outbox
        self._leases = leases
        self._commands = commands or Commands()
        self._memory = memory or NoMemory()
        self._presence = presence or _no_presence
        self._recall = recall if limits.max_tool_calls > 0 else None
        # Per-conversation locks held by a loop's step, or by `guard()` from outside.
        self._guards: dict[uuid.UUID, tuple[asyncio.Lock, int]] = {}
        # Conversations a command merged into another (linking) or erased: their
        # loops end.
        self._ended: set[uuid.UUID] = set()
        self._loops: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._again: set[uuid.UUID] = set()
        self._waiters: dict[uuid.UUID, list[tuple[int, asyncio.Future[StoredMessage]]]] = {}
        self._closing = False

    def request(self, conversation_id: uuid.UUID) -> None:
        """Make sure everything unanswered in the conversation gets a turn."""
        if self._closing:
            return
        if conversation_id in self._loops:
            self._again.add(conversation_id)
            return
        task = asyncio.create_task(self._loop(conversation_id), name=f"turns:{conversation_id}")
        self._loops[conversation_id] = task

    def reply_future(self, conversation_id: uuid.UUID, seq: int) -> asyncio.Future[StoredMessage]:
        """A future resolved with the reply of the turn that answers user message `seq`."""
        future: asyncio.Future[StoredMessage] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(conversation_id, []).append((seq, future))
        return future

    def forget_future(
        self, conversation_id: uuid.UUID, future: asyncio.Future[StoredMessage]
    ) -> None:
        waiters = self._waiters.get(conversation_id, [])
        waiters[:] = [(seq, f) for seq, f in waiters if f is not future]
        if not waiters:
            self._waiters.pop(conversation_id, None)

    async def idle(self) -> None:
        """Until no turn runs in this process, the work after each reply (the archive's
        cut) included: a waiting request has its answer before that (tests, benchmarks)."""
        while self._loops:
            await asyncio.wait(list(self._loops.values()))

    async def close(self, deadline: float) -> None:
        """Stop taking turns, let running ones finish within `deadline` s, cancel the rest.

        A cancelled turn stored nothing of its reply, so it runs again on the next start.
        """
        self._closing = True
        await finish_or_cancel(list(self._loops.values()), deadline)

    @contextlib.asynccontextmanager
    async def guard(self, conversation_id: uuid.UUID) -> AsyncIterator[None]:
        """Hold a conversation's turns, on every replica: wait for a running step to end
        and keep the next from starting until released (linking rewrites the
        conversation). Waits as long as it must: bound it with a timeout. Not
        re-entrant: a step must not guard its own conversation."""
        async with (
            self._leases.hold(conversation_id, wait=math.inf),
            self._step_lock(conversation_id),
        ):
            yield

    @contextlib.asynccontextmanager
    async def _step_lock(self, conversation_id: uuid.UUID) -> AsyncIterator[None]:
        """This process's side of `guard`: one step at a time per conversation."""
        lock, users = self._guards.get(conversation_id, (asyncio.Lock(), 0))
        self._guards[conversation_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._guards[conversation_id]
            if users <= 1:
                del self._guards[conversation_id]
            else:
                self._guards[conversation_id] = (lock, users - 1)

    async def _loop(self, conversation_id: uuid.UUID) -> None:
        try:
            while True:
                async with self._leases.hold(conversation_id) as mine:
                    if not mine:
                        return  # another replica answers; it looks again after releasing
                    await self._rounds(conversation_id)
                # Released. A message stored on another replica while we held the lease
                # found it taken: answering it is ours, unless that replica is faster.
                # One stored here meanwhile has set `_again` (this loop was still
                # registered), whatever the read below saw.
                if self._closing or conversation_id in self._ended:
                    return
                if not await self._owed(conversation_id):
                    return
        except LeaseLost:
            log.warning(
                "a turn lost its lease; another replica answers",
                conversation_id=str(conversation_id),
            )
        except Exception:
            log.exception("turn loop failed", conversation_id=str(conversation_id))
        finally:
            self._loops.pop(conversation_id, None)
            self._ended.discard(conversation_id)

    async def _rounds(self, conversation_id: uuid.UUID) -> None:
        # A loop starts because a message arrived: the first round goes straight to the
        # turn, and so does a round after a step that left messages it read unanswered,
        # or one after a message came in here meanwhile. What other replicas stored
        # meanwhile is asked after releasing the lease (`_loop`), once.
        known_owed = True
        while not self._closing and conversation_id not in self._ended:
            if not known_owed and conversation_id not in self._again:
                return
            self._again.discard(conversation_id)
            async with self._step_lock(conversation_id):
                context = await self._memory.before_turn(conversation_id)
                state = await self._conversations.load_turn(conversation_id)
                if state is None:
                    if not known_owed:
                        return  # owed, yet nothing to answer: a merge answered it
                    known_owed = False
                    continue
                known_owed = await self._step(state, context)

    async def _owed(self, conversation_id: uuid.UUID) -> bool:
        """After releasing: whether a message may be unanswered since the loop last
        looked. One stored in this process has set `_again` (the loop was still
        registered); only where other processes store messages too must the database
        be asked."""
        if not self._leases.across_processes:
            return conversation_id in self._again
        owed = await self._conversations.owes_reply(conversation_id)
        return owed or conversation_id in self._again  # read after: none missed meanwhile

    async def _step(self, state: TurnState, context: TurnContext) -> bool:
        """Answer the first command, or every message before the first command; True if
        messages the step read are left unanswered."""
        invocations = [self._commands.parse(m) for m in state.unanswered]
        if invocations[0] is not None:
            await self._run_command(state, invocations[0])
            return len(invocations) > 1
        count = next((i for i, inv in enumerate(invocations) if inv is not None), len(invocations))
        answered = state.unanswered[:count]
        upto = answered[-1].seq
        # Later user messages (after a command) belong to later turns.
        live = tuple(m for m in state.live if m.role is not Role.USER or m.seq <= upto)
        state = replace(state, live=live, unanswered=answered)
        started = time.monotonic()
        async with self._presence(answered[-1]):
            answer = await self._model(state, context, answered[-1])
        held = self._leases.held(state.conversation_id)
        reply = await self._finish(state, answered[-1], answer, held)
        live_tokens = sum(m.token_count for m in state.live) + reply.token_count
        self._metrics.turns.labels("model" if answer.role is Role.ASSISTANT else "notice").inc()
        self._metrics.turn_seconds.observe(time.monotonic() - started)
        self._metrics.live_window_tokens.observe(live_tokens)
        await self._memory.after_turn(state.conversation_id, live_tokens)
        return count < len(invocations)

    async def _run_command(self, state: TurnState, invocation: Invocation) -> None:
        answer = await self._command(invocation)
        # A command may move its own message: `/link CODE` merges this conversation
        # into another. The answer follows the message, and that conversation's
        # turns take over from here.
        trigger = await self._messages.message_by_id(invocation.message.id)
        if trigger is None:
            # `/erase CODE` erased the conversation, this message with it; the command
            # said so itself, and there is nothing left to answer.
            self._ended.add(state.conversation_id)
            return
        moved = trigger.conversation_id != state.conversation_id
        held = None if moved else self._leases.held(state.conversation_id)
        if moved:
            self._ended.add(state.conversation_id)
            state = replace(state, conversation_id=trigger.conversation_id)
        await self._finish(state, trigger, answer, held)
        if moved:
            self.request(trigger.conversation_id)

    async def _command(self, invocation: Invocation) -> _Answer:
        self._metrics.turns.labels("command").inc()
        return _Answer(await self._commands.run(invocation), Role.EVENT, COMMAND_SOURCE)

    async def _model(
        self, state: TurnState, context: TurnContext, trigger: StoredMessage
    ) -> _Answer:
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
        budget = window - message_tokens(system) - tools_tokens(tools) - kept
        turns = fit_to_budget(render_live(state.live, state.timezone, group=state.group), budget)
        prompt = Prompt(system, tuple(turns), max_tokens=self._limits.max_reply_tokens, tools=tools)
        # What the live messages leave is the rounds' too (less than kept only when the
        # newest message alone outgrew its share).
        room = window - _size(prompt)
        try:
            return await self._generate(state, prompt, room, trigger)
        except LLMError as exc:
            log.warning(
                "model unavailable", conversation_id=str(state.conversation_id), error=str(exc)
            )
            return _Answer(MODEL_DOWN_NOTICE, Role.EVENT, NOTICE_SOURCE)

    async def _generate(
        self, state: TurnState, prompt: Prompt, room: int, trigger: StoredMessage
    ) -> _Answer:
        """Ask the model, run the recall tools it calls (up to the limit) and ask again
        with their answers, until it answers in text. The prompt's system text is the
        same bytes on every call, and its turns too up to the last call at the limit,
        which has the rounds written out after them; only the steps grow, within `room`
        tokens, what the window leaves them."""
        steps: list[ToolStep] = []
        lookups: list[NewLookup] = []
        scope: Scope | None = None  # read once, at the turn's first call
        left = self._limits.max_tool_calls
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
                text, calls = await self._call_model(state.conversation_id, asked)
                if not calls or self._recall is None:
                    break
                if left <= 0:
                    # Offered no tools, the model (or its server) called some anyway.
                    if text:
                        break
                    return _Answer(TOOL_LIMIT_NOTICE, Role.EVENT, NOTICE_SOURCE)
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
        return _Answer(text, prompt_tokens=_size(asked))

    async def _call_model(
        self, conversation_id: uuid.UUID, prompt: Prompt
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
        with self._metrics.model_seconds.time():
            async for piece in self._llm.stream(prompt):
                if isinstance(piece, ToolCall):
                    calls.append(piece)
                    continue
                pieces.append(piece)
                # A model server can send what no database stores (NUL, a lone surrogate).
                shown = clean(piece)
                if held is not None:
                    held.append(shown)
                    if sum(map(len, held)) < ANSWER_CHARS:
                        continue
                    shown, held = "".join(held), None
                self._publish_delta(conversation_id, shown)
        if held and not calls:  # short, and no tool call came: the answer after all
            self._publish_delta(conversation_id, "".join(held))
        return clean("".join(pieces)).strip(), calls

    def _publish_delta(self, conversation_id: uuid.UUID, text: str) -> None:
        if text:
            self._hub.publish(conversation_id, DeltaEvent(conversation_id, text))

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

    async def _finish(
        self, state: TurnState, trigger: StoredMessage, answer: _Answer, held: Held | None
    ) -> StoredMessage:
        """Store the answer as the reply to everything up to `trigger`, then deliver it;
        with `held`, only while this replica still holds the conversation."""
        stored_is_sent = self._outbox.delivered_by_storing(trigger.channel)
        reply, _ = await self._messages.add_message(
            state.conversation_id,
            NewMessage(
                role=answer.role,
                channel=trigger.channel,
                text=answer.text,
                source=answer.source,
                reply_to_seq=trigger.seq,
                delivery=Delivery.SENT if stored_is_sent else Delivery.PENDING,
                prompt_tokens=answer.prompt_tokens,
            ),
            now=self._clock.now(),
            held=held,
        )
        self._hub.message(reply)
        self._resolve(state.conversation_id, trigger.seq, reply)
        if not stored_is_sent:
            await self._outbox.deliver(reply, trigger)
        return reply

    def _resolve(self, conversation_id: uuid.UUID, upto: int, reply: StoredMessage) -> None:
        waiters = self._waiters.pop(conversation_id, [])
        still_waiting = []
        for seq, future in waiters:
            if seq > upto:
                still_waiting.append((seq, future))
            elif not future.done():
                future.set_result(reply)
        if still_waiting:
            self._waiters[conversation_id] = still_waiting


def _size(prompt: Prompt) -> int:
    """About how many tokens a call's prompt is: system, turns, the tools it declares
    and its tool steps."""
    texts = [prompt.system, *(turn.content for turn in prompt.turns)]
    return (
        sum(message_tokens(text) for text in texts)
        + tools_tokens(prompt.tools)
        + steps_tokens(prompt.steps)
    )


@contextlib.asynccontextmanager
async def _no_presence(_: StoredMessage) -> AsyncIterator[None]:
    yield
