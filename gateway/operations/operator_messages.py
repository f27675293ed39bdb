"""Messages an operator sends into a conversation: stored under their own source line,
then delivered like a reply through the durable outbox.

The model later reads them as `[source: operator via REST]` input, never as something
the person typed, so an operator's words can never become one of the person's facts.
"""

from __future__ import annotations

import uuid

from gateway.channels.outbox import Outbox
from gateway.clock import Clock
from gateway.errors import InputError
from gateway.events.hub import Hub
from gateway.llm.base import LLMProvider, Prompt, complete_counted
from gateway.llm.offline import OFFLINE
from gateway.text import MAX_INT64, clean
from memory.chat_turn import ChatTurn
from memory.context import render_live
from memory.provenance import label
from memory.storage.messages import Messages, NewMessage, StoredMessage
from memory.storage.models import Delivery, Role, UsageKind
from memory.storage.usage_days import UsageLedger

OPERATOR_SOURCE = "operator via REST"
# How much of the conversation the assistant reads to write an operator's message.
CONTEXT_MESSAGES = 20
COMPOSE_SYSTEM = (
    "You write one message that the assistant sends, unprompted, to the person in this "
    "conversation. An operator of the assistant says what the message should say. Write "
    "only the message itself, in the conversation's language and the assistant's voice; "
    "no preamble, no quotes."
)


class NoRecipient(InputError):
    """Nobody has written into the conversation (on that channel): no chat to send to."""


class NoModel(InputError):
    """Only a configured model can write a message from an instruction."""


class OperatorMessages:
    def __init__(
        self,
        messages: Messages,
        outbox: Outbox,
        hub: Hub,
        clock: Clock,
        llm: LLMProvider,
        max_tokens: int,
        ledger: UsageLedger | None = None,
    ) -> None:
        """`ledger`: where composing's model calls are charged (None: nowhere)."""
        self._ledger = ledger
        self._messages = messages
        self._outbox = outbox
        self._hub = hub
        self._clock = clock
        self._llm = llm
        self._max_tokens = max_tokens

    async def recipient(self, conversation_id: uuid.UUID, channel: str | None) -> StoredMessage:
        """The message whose chat an operator's message goes to: the newest typed on
        `channel`, or on any channel; `NoRecipient` if there is none."""
        target = await self._messages.last_from(conversation_id, channel)
        if target is None:
            where = "" if channel is None else f" on {channel}"
            raise NoRecipient(f"nobody has written into this conversation{where} yet")
        return target

    async def send(self, target: StoredMessage, text: str) -> StoredMessage:
        """Store `text` and deliver it to the chat `target` was written in."""
        conversation_id = target.conversation_id
        stored_is_sent = self._outbox.delivered_by_storing(target.channel)
        message, _ = await self._messages.add_message(
            conversation_id,
            NewMessage(
                role=Role.EVENT,
                channel=target.channel,
                text=text,
                # The addressee: a message that answers nothing names where it goes.
                identity_id=target.identity_id,
                source=OPERATOR_SOURCE,
                delivery=Delivery.SENT if stored_is_sent else Delivery.PENDING,
            ),
            now=self._clock.now(),
        )
        self._hub.message(message)
        await self._outbox.send_unprompted(message, await self._outbox.chat_of(target))
        return message

    async def compose(self, conversation_id: uuid.UUID, instruction: str) -> str:
        """The assistant's wording of what an operator wants said; `LLMError` if the
        model could not be reached."""
        if self._llm.name == OFFLINE:
            # The offline stand-in would send the person its own "no model" notice.
            raise NoModel("no model is configured to write it: send `text` instead")
        recent = await self._messages.messages_before(conversation_id, MAX_INT64, CONTEXT_MESSAGES)
        asked = ChatTurn("user", label(instruction, source=OPERATOR_SOURCE))
        turns = [*render_live(recent, "UTC"), asked]
        while len(turns) > 1 and turns[0].role == "assistant":
            turns.pop(0)
        prompt = Prompt(system=COMPOSE_SYSTEM, turns=tuple(turns), max_tokens=self._max_tokens)
        text, usage = await complete_counted(self._llm, prompt)
        if self._ledger is not None:
            # Work for the person, not a turn of theirs: counted apart from their budget.
            await self._ledger.charge_conversation(
                conversation_id, UsageKind.BACKGROUND, usage, self._clock.now()
            )
        text = clean(text).strip()
        if not text:
            raise InputError("the model wrote nothing for that instruction")
        return text
