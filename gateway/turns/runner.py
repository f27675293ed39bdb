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
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Protocol

import structlog

from gateway.clock import Clock
from gateway.events.hub import Hub
from gateway.llm import LLMProvider
from gateway.metrics import Metrics
from gateway.tasks import finish_or_cancel
from gateway.turns.answering import (
    Answer,
    Answerer,
    ImageSource,
    Recalling,
    TurnContext,
    TurnLimits,
)
from gateway.turns.budget import BUDGET_NOTICE, Budgets, Verdict
from gateway.turns.leases import ConversationLeases
from gateway.turns.presence import NO_PREVIEW, Preview
from gateway.turns.slots import Arrivals, Slot, TurnSlots
from memory.provenance import COMMAND_SOURCE, NOTICE_SOURCE, is_firing
from memory.storage.attachments import fetching as files_fetching
from memory.storage.conversations import Conversations, TurnState
from memory.storage.leases import Held, LeaseLost
from memory.storage.messages import Messages, NewMessage, StoredMessage
from memory.storage.models import Delivery, Role
from memory.storage.usage_days import payer_for

log = structlog.get_logger(__name__)


class Outbox(Protocol):
    """Where replies go once stored."""

    def delivered_by_storing(self, channel: str) -> bool:
        """True where clients read stored messages (web chat): nothing to send."""
        ...

    async def deliver(self, reply: StoredMessage, trigger: StoredMessage) -> None:
        """Send a stored reply; `trigger` is the message that started the turn."""
        ...


class ChatCommands(Protocol):
    """The gateway's own chat commands (`gateway.commands`): answered in the turn order
    of the conversation they were typed in, by the gateway, never by the model. A port,
    as the outbox is: the commands use the turns (`/link` holds them while it merges),
    so they sit above them and the runner reaches them only through this."""

    def recognises(self, message: StoredMessage) -> bool:
        """True if the message invokes a command the gateway answers."""
        ...

    async def answer(self, message: StoredMessage) -> str:
        """Run the command the message invokes; what to answer."""
        ...


# Held while the model writes an answer to a message (typing indicators), and showing
# the answer as it is written where the channel can.
Presence = Callable[[StoredMessage], AbstractAsyncContextManager[Preview]]


class FileWait(Protocol):
    async def settled(self, message_ids: Sequence[int]) -> None:
        """Until no file of these messages is still being fetched (a timeout bounds it)."""
        ...


class TurnMemory(Protocol):
    """What the archive does around a turn."""

    async def before_turn(self, conversation_id: uuid.UUID) -> TurnContext:
        """Apply finished archive work; return the timeline rows and the profile."""
        ...

    async def after_turn(
        self, conversation_id: uuid.UUID, live_tokens: int, undescribed: tuple[int, ...] = ()
    ) -> None:
        """Cut chunks if the live window (`live_tokens` after the reply) outgrew its
        limit; have the images the model was shown and that are `undescribed` described;
        never waits for either."""
        ...


class NoMemory:
    async def before_turn(self, conversation_id: uuid.UUID) -> TurnContext:
        return TurnContext()

    async def after_turn(
        self, conversation_id: uuid.UUID, live_tokens: int, undescribed: tuple[int, ...] = ()
    ) -> None:
        return None


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
        commands: ChatCommands,
        memory: TurnMemory | None = None,
        presence: Presence | None = None,
        metrics: Metrics | None = None,
        recall: Recalling | None = None,
        images: ImageSource | None = None,
        budgets: Budgets | None = None,
        files: FileWait | None = None,
        files_wait: float = 20.0,
        concurrency: int = 2,
        arrivals: Arrivals | None = None,
    ) -> None:
        """`budgets`: the daily token caps (None: nothing is capped); `files`: where a
        turn waits, at most `files_wait` s, for the files of its messages still being
        fetched (None: it does not); `arrivals`: whose pauses turns wait for (shared
        with the job runner; None: the runner's own)."""
        self._files = files
        self._files_wait = files_wait
        self._metrics = metrics or Metrics()
        self._budgets = budgets
        self._messages = messages
        self._conversations = conversations
        self._hub = hub
        self._clock = clock
        self._answerer = Answerer(
            llm=llm,
            hub=hub,
            clock=clock,
            persona=persona,
            limits=limits,
            conversations=conversations,
            metrics=self._metrics,
            recall=recall,
            images=images,
        )
        self._outbox = outbox
        self._leases = leases
        self._commands = commands
        self._memory = memory or NoMemory()
        self._presence = presence or _no_presence
        # Per-conversation locks held by a loop's step, or by `guard()` from outside.
        self._guards: dict[uuid.UUID, tuple[asyncio.Lock, int]] = {}
        # Conversations a command merged into another (linking) or erased: their
        # loops end.
        self._ended: set[uuid.UUID] = set()
        self._loops: dict[uuid.UUID, asyncio.Task[None]] = {}
        # A conversation waits for a slot before it takes its lease, so a waiting one
        # holds no lease and costs one task.
        self._slots = TurnSlots(concurrency, arrivals)
        self._again: set[uuid.UUID] = set()
        # None: the message is left unanswered (past the day's budget).
        self._waiters: dict[uuid.UUID, list[tuple[int, asyncio.Future[StoredMessage | None]]]] = {}
        self._closing = False

    def arriving(self) -> contextlib.AbstractContextManager[None]:
        """Around storing a message: turns wait to take a slot until none is stored."""
        return self._slots.arrivals.arriving()

    def request(self, conversation_id: uuid.UUID) -> None:
        """Make sure everything unanswered in the conversation gets a turn."""
        if self._closing:
            return
        if conversation_id in self._loops:
            self._again.add(conversation_id)
            return
        task = asyncio.create_task(self._loop(conversation_id), name=f"turns:{conversation_id}")
        self._loops[conversation_id] = task

    def reply_future(
        self, conversation_id: uuid.UUID, seq: int
    ) -> asyncio.Future[StoredMessage | None]:
        """A future resolved with the reply of the turn that answers user message `seq`
        (None: the turn left it unanswered)."""
        future: asyncio.Future[StoredMessage | None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(conversation_id, []).append((seq, future))
        return future

    def forget_future(
        self, conversation_id: uuid.UUID, future: asyncio.Future[StoredMessage | None]
    ) -> None:
        waiters = self._waiters.get(conversation_id, [])
        waiters[:] = [(seq, f) for seq, f in waiters if f is not future]
        if not waiters:
            self._waiters.pop(conversation_id, None)

    def forget(self, conversation_ids: Iterable[uuid.UUID]) -> None:
        """Drop what this process keeps of the conversations' live windows, read and
        rendered (after an erasure: its text leaves memory too). Other replicas drop
        theirs when a turn finds the window's version moved, or as they evict."""
        for conversation_id in conversation_ids:
            self._conversations.forget_window(conversation_id)
            self._answerer.forget(conversation_id)

    def keeps(self, conversation_id: uuid.UUID) -> bool:
        """Whether this process keeps anything of the conversation's window (tests)."""
        return self._conversations.keeps_window(conversation_id) or self._answerer.keeps(
            conversation_id
        )

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
        waiting = True
        self._metrics.turns_waiting.inc()
        try:
            async with self._slots.taken() as slot:
                waiting = False
                self._metrics.turns_waiting.dec()
                await self._answer_all(conversation_id, slot)
        except LeaseLost:
            log.warning(
                "a turn lost its lease; another replica answers",
                conversation_id=str(conversation_id),
            )
        except Exception:
            log.exception("turn loop failed", conversation_id=str(conversation_id))
        finally:
            if waiting:  # cancelled before its turn: stopping; a restart answers it
                self._metrics.turns_waiting.dec()
            self._loops.pop(conversation_id, None)
            self._ended.discard(conversation_id)

    async def _answer_all(self, conversation_id: uuid.UUID, slot: Slot) -> None:
        while not self._closing:
            async with self._leases.hold(conversation_id) as mine:
                if not mine:
                    return  # another replica answers; it looks again after releasing
                await self._rounds(conversation_id, slot)
            # Released. A message stored on another replica while we held the lease
            # found it taken: answering it is ours, unless that replica is faster. One
            # stored here meanwhile has set `_again` (this loop was still registered),
            # whatever the read below saw.
            if self._closing or conversation_id in self._ended:
                return
            if not await self._owed(conversation_id):
                return

    async def _rounds(self, conversation_id: uuid.UUID, slot: Slot) -> None:
        # A loop starts because a message arrived: the first round goes straight to the
        # turn, and so does a round after a step that left messages it read unanswered,
        # or one after a message came in here meanwhile. What other replicas stored
        # meanwhile is asked after releasing the lease (`_loop`), once.
        known_owed = True
        waited: set[int] = set()  # messages whose files this loop has waited for
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
                fetching = [m.id for m in state.unanswered if files_fetching(m.media)]
                if self._files is not None and fetching and not waited.issuperset(fetching):
                    # Answer with the files the person sent, once they are here: read
                    # the turn again after, however the wait ended (once per message).
                    waited.update(fetching)
                    with contextlib.suppress(TimeoutError):
                        async with slot.lent(), asyncio.timeout(self._files_wait):
                            await self._files.settled(fetching)
                    continue
                known_owed = await self._step(state, context, slot)

    async def _owed(self, conversation_id: uuid.UUID) -> bool:
        """After releasing: whether a message may be unanswered since the loop last
        looked. One stored in this process has set `_again` (the loop was still
        registered); only where other processes store messages too must the database
        be asked."""
        if not self._leases.across_processes:
            return conversation_id in self._again
        owed = await self._conversations.owes_reply(conversation_id)
        return owed or conversation_id in self._again  # read after: none missed meanwhile

    async def _step(self, state: TurnState, context: TurnContext, slot: Slot) -> bool:
        """Answer the first command, or every message before the first command; True if
        messages the step read are left unanswered."""
        is_command = [self._commands.recognises(m) for m in state.unanswered]
        if is_command[0]:
            await self._run_command(state, state.unanswered[0])
            return len(is_command) > 1
        count = next((i for i, command in enumerate(is_command) if command), len(is_command))
        answered = state.unanswered[:count]
        if count < len(is_command):
            # Later user messages (after a command) belong to later turns. Without one,
            # every user message of the window is answered or before: nothing to leave
            # out, and the window is not walked.
            upto = answered[-1].seq
            live = tuple(m for m in state.live if m.role is not Role.USER or m.seq <= upto)
            state = replace(state, live=live, unanswered=answered)
        started = time.monotonic()
        if self._budgets is not None:
            verdict = await self._budgets.verdict(state, self._clock.now())
            if verdict is not Verdict.OPEN:
                await self._spent(state, answered[-1], verdict)
                return count < len(is_command)
        async with self._presence(answered[-1]) as preview:
            answer = await self._answerer.answer(
                state, context, answered[-1], waiting=slot.lent, preview=preview
            )
        held = self._leases.held(state.conversation_id)
        reply = await self._finish(state, answered[-1], answer, held)
        live_tokens = sum(m.token_count for m in state.live) + reply.token_count
        self._metrics.turns.labels("model" if answer.role is Role.ASSISTANT else "notice").inc()
        self._metrics.turn_seconds.observe(time.monotonic() - started)
        self._metrics.live_window_tokens.observe(live_tokens)
        await self._memory.after_turn(state.conversation_id, live_tokens, answer.undescribed)
        return count < len(is_command)

    async def _spent(self, state: TurnState, trigger: StoredMessage, verdict: Verdict) -> None:
        """The day's tokens are spent: no model. Reminders coming due are still sent in
        their own words; the person is told once a day; the rest is stored unanswered."""
        assert self._budgets is not None
        held = self._leases.held(state.conversation_id)
        fired = [m.text for m in state.unanswered if is_firing(m.source)]
        notice = [BUDGET_NOTICE] if verdict is Verdict.NOTICE else []
        self._metrics.turns.labels("over_budget").inc()
        if fired:
            await self._finish(state, trigger, Answer("\n\n".join(fired + notice)), held)
        elif notice:
            await self._finish(
                state, trigger, Answer(BUDGET_NOTICE, Role.EVENT, NOTICE_SOURCE), held
            )
        else:
            now = self._clock.now()
            await self._messages.pass_over(state.conversation_id, trigger.seq, now=now, held=held)
            self._resolve(state.conversation_id, trigger.seq, None)
        if notice:
            day = self._budgets.payer(state).day(self._clock.now())
            await self._conversations.budget_told(state.conversation_id, day)

    async def _run_command(self, state: TurnState, message: StoredMessage) -> None:
        answer = await self._command(message)
        # A command may move its own message: `/link CODE` merges this conversation
        # into another. The answer follows the message, and that conversation's
        # turns take over from here.
        trigger = await self._messages.message_by_id(message.id)
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

    async def _command(self, message: StoredMessage) -> Answer:
        self._metrics.turns.labels("command").inc()
        return Answer(await self._commands.answer(message), Role.EVENT, COMMAND_SOURCE)

    async def _finish(
        self, state: TurnState, trigger: StoredMessage, answer: Answer, held: Held | None
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
                model=answer.model,
                usage=answer.usage,
                payer=payer_for(state.conversation_id, state.user_id, state.group, state.timezone),
            ),
            now=self._clock.now(),
            held=held,
        )
        self._hub.message(reply)
        self._resolve(state.conversation_id, trigger.seq, reply)
        if not stored_is_sent:
            await self._outbox.deliver(reply, trigger)
        return reply

    def _resolve(self, conversation_id: uuid.UUID, upto: int, reply: StoredMessage | None) -> None:
        waiters = self._waiters.pop(conversation_id, [])
        still_waiting = []
        for seq, future in waiters:
            if seq > upto:
                still_waiting.append((seq, future))
            elif not future.done():
                future.set_result(reply)
        if still_waiting:
            self._waiters[conversation_id] = still_waiting


@contextlib.asynccontextmanager
async def _no_presence(_: StoredMessage) -> AsyncIterator[Preview]:
    yield NO_PREVIEW
