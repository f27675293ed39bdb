"""The core, as connectors see it through the port: take a message in, hand a reply out.

A connector calls `receive()` with a verified, normalised message and acknowledges
the platform only after it returns: by then the message is committed. What a channel
can do (split, pace, type, take notices) is read from its `Capabilities`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager

import structlog

from gateway.channels.delivery import DeliveryLoop
from gateway.channels.policy import AccessPolicy
from gateway.channels.port import Connector, Received
from gateway.clock import Clock
from gateway.errors import AccessRefused, DeliveryError
from gateway.messages import ChatRef, Inbound, Outbound
from gateway.text import clean_inbound
from gateway.turns.hub import Event, Hub
from gateway.turns.presence import typing_while
from gateway.turns.runner import TurnRunner
from memory.storage.identities import IdentityRef
from memory.storage.messages import NewMessage, StoredMessage
from memory.storage.models import Delivery, Role
from memory.storage.repositories import Repositories

log = structlog.get_logger(__name__)


class Core:
    def __init__(
        self,
        *,
        repos: Repositories,
        hub: Hub,
        clock: Clock,
        default_timezone: str,
        policy: AccessPolicy,
        delivery: DeliveryLoop,
    ) -> None:
        self._messages = repos.messages
        self._conversations = repos.conversations
        self._identities = repos.identities
        self._deliveries = repos.deliveries
        self.hub = hub
        self._clock = clock
        self._default_timezone = default_timezone
        self._policy = policy
        self._delivery = delivery
        self._senders: dict[str, Connector] = {}
        self._runner: TurnRunner | None = None

    def attach(self, runner: TurnRunner, senders: dict[str, Connector]) -> None:
        self._runner = runner
        self._senders = senders

    @property
    def runner(self) -> TurnRunner:
        if self._runner is None:
            raise RuntimeError("core used before a turn runner was attached")
        return self._runner

    async def identity(self, channel: str, external_id: str, display_name: str = "") -> IdentityRef:
        return await self._identities.resolve_identity(
            channel,
            external_id,
            display_name=display_name,
            timezone=self._default_timezone,
            now=self._clock.now(),
        )

    @property
    def clock(self) -> Clock:
        return self._clock

    async def receive(self, inbound: Inbound) -> Received:
        """Store a message and start its turn; `AccessRefused` (nothing stored) if the
        channel's policy does not let the sender in, once its answer is sent where the
        channel takes notices; `InputError` if it cannot be stored."""
        inbound = clean_inbound(inbound)
        try:
            await self._policy.admit(inbound)
        except AccessRefused as refused:
            if inbound.expects_reply:
                await self._notify(inbound, refused.answer)
            raise
        ref = await self.identity(inbound.channel, inbound.external_user_id, inbound.display_name)
        conversation_id = ref.conversation_id
        if inbound.group_id is not None:
            conversation_id = await self._conversations.group_conversation(
                inbound.channel, inbound.group_id, title=inbound.group_title, now=self._clock.now()
            )
        message, created = await self._messages.add_message(
            conversation_id,
            NewMessage(
                role=Role.USER if inbound.expects_reply else Role.EVENT,
                channel=inbound.channel,
                text=inbound.text,
                identity_id=ref.identity_id,
                author_name=inbound.display_name,
                source=inbound.source,
                platform_message_id=inbound.platform_message_id,
                platform_ts=inbound.platform_ts,
            ),
            now=self._clock.now(),
        )
        if created:
            self.hub.message(message)
            if inbound.expects_reply:
                self.runner.request(conversation_id)
        return Received(message, ref, created)

    async def reply_to(self, received: Received, wait_seconds: float) -> StoredMessage | None:
        """The reply to a received message, waiting up to `wait_seconds` for its turn."""
        message = received.message
        conversation_id = message.conversation_id
        future = self.runner.reply_future(conversation_id, message.seq)
        try:
            # A message stored just now cannot have its turn finished: `receive` only
            # scheduled it. A redelivered one may have been answered long ago; that is
            # checked after registering, so a turn ending in between is not missed.
            if not received.created:
                stored = await self._messages.reply_for(conversation_id, message.seq)
                if stored is not None:
                    return stored
            return await asyncio.wait_for(asyncio.shield(future), wait_seconds)
        except TimeoutError:
            return None
        finally:
            self.runner.forget_future(conversation_id, future)

    async def history(
        self, conversation_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[StoredMessage]:
        return await self._messages.messages_after(conversation_id, after_seq, limit)

    def events(self, conversation_id: uuid.UUID) -> AbstractContextManager[asyncio.Queue[Event]]:
        return self.hub.subscribe(conversation_id)

    def delivered_by_storing(self, channel: str) -> bool:
        sender = self._senders.get(channel)
        return sender is not None and sender.capabilities.delivered_by_storing

    async def _notify(self, inbound: Inbound, text: str) -> None:
        """A gateway answer that is not stored (a refusal, a pairing code)."""
        sender = self._senders.get(inbound.channel)
        if sender is None or not sender.capabilities.notices:
            return
        chat = ChatRef(
            channel=inbound.channel,
            external_user_id=inbound.external_user_id,
            group_id=inbound.group_id,
            platform_message_id=inbound.platform_message_id,
        )
        try:
            await sender.notify(chat, text)
        except DeliveryError as exc:
            log.warning("could not send a notice", channel=inbound.channel, error=exc.reason)

    async def deliver(self, reply: StoredMessage, trigger: StoredMessage) -> None:
        """Send a stored reply through the channel of the message that started the turn."""
        sender = self._senders.get(reply.channel)
        if sender is None:
            await self._deliveries.attempt_failed(
                reply.id, f"no {reply.channel} connector is configured", final=True
            )
            return
        if sender.capabilities.delivered_by_storing:  # only the address matters
            chat = ChatRef(reply.channel, await self._identities.external_id(trigger.identity_id))
        else:
            chat = await self.chat_of(trigger)
        outbound = Outbound(
            message_id=reply.id,
            channel=reply.channel,
            external_user_id=chat.external_user_id,
            text=reply.text,
            reply_to_platform_id=trigger.platform_message_id,
            group_id=chat.group_id,
            reply_to_sent_at=trigger.sent_at,
        )
        await self._delivery.submit(outbound, sender)

    async def chat_of(self, message: StoredMessage) -> ChatRef:
        """Where an answer to `message` goes: its group, or its author's private chat."""
        return ChatRef(
            channel=message.channel,
            external_user_id=await self._identities.external_id(message.identity_id),
            group_id=await self._conversations.group_of(message.conversation_id),
            platform_message_id=message.platform_message_id,
        )

    @contextlib.asynccontextmanager
    async def working(self, trigger: StoredMessage) -> AsyncIterator[None]:
        """While a turn answering `trigger` runs: a typing indicator where it has one."""
        sender = self._senders.get(trigger.channel)
        interval = None if sender is None else sender.capabilities.typing_interval
        if sender is None or interval is None:
            yield
            return
        async with typing_while(sender, await self.chat_of(trigger), interval):
            yield

    async def receipt(
        self, channel: str, platform_id: str, status: Delivery, error: str | None
    ) -> bool:
        """A platform's delivery report on a message we sent; False if it is not ours."""
        return await self._deliveries.receipt(
            channel, platform_id, status, error, now=self._clock.now()
        )

    async def close_delivery(self, deadline: float) -> None:
        await self._delivery.close(deadline)

    async def resume(self) -> None:
        """After a restart: run the turns a crash cut short."""
        for conversation_id in await self._conversations.conversations_owing_reply():
            self.runner.request(conversation_id)
        for reply in await self._messages.pending_deliveries():
            if reply.reply_to_seq is None:
                continue
            trigger = await self._messages.message_at(reply.conversation_id, reply.reply_to_seq)
            if trigger is not None:
                await self.deliver(reply, trigger)
