"""The core that connectors talk to: take a message in, hand a reply out.

A connector calls `receive()` with a verified, normalised message and acknowledges
the platform only after it returns: by then the message is committed.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import structlog

from gateway.clock import Clock
from gateway.connector import Connector
from gateway.errors import DeliveryError
from gateway.hub import Hub
from gateway.messages import Inbound, Outbound
from gateway.turns import TurnRunner
from memory.models import Delivery, Role
from memory.store import IdentityRef, NewMessage, Store, StoredMessage

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Received:
    message: StoredMessage
    identity: IdentityRef
    # False when the platform redelivered a message we already had.
    created: bool


class Core:
    def __init__(self, *, store: Store, hub: Hub, clock: Clock, default_timezone: str) -> None:
        self.store = store
        self.hub = hub
        self._clock = clock
        self._default_timezone = default_timezone
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
        return await self.store.resolve_identity(
            channel,
            external_id,
            display_name=display_name,
            timezone=self._default_timezone,
            now=self._clock.now(),
        )

    async def receive(self, inbound: Inbound) -> Received:
        ref = await self.identity(inbound.channel, inbound.external_user_id, inbound.display_name)
        message, created = await self.store.add_message(
            ref.conversation_id,
            NewMessage(
                role=Role.USER,
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
            self.runner.request(ref.conversation_id)
        return Received(message, ref, created)

    async def reply_to(self, message: StoredMessage, wait_seconds: float) -> StoredMessage | None:
        """The reply to a user message, waiting up to `wait_seconds` for its turn to end."""
        conversation_id = message.conversation_id
        future = self.runner.reply_future(conversation_id, message.seq)
        try:
            # Checked after registering, so a turn ending in between is not missed.
            stored = await self.store.reply_for(conversation_id, message.seq)
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
        return await self.store.messages_after(conversation_id, after_seq, limit)

    async def deliver(self, reply: StoredMessage, trigger: StoredMessage) -> None:
        """Send a stored reply through the channel of the message that started the turn."""
        sender = self._senders.get(reply.channel)
        if sender is None:
            await self.store.set_delivery(
                reply.id, Delivery.FAILED, f"no {reply.channel} connector"
            )
            return
        outbound = Outbound(
            message_id=reply.id,
            channel=reply.channel,
            external_user_id=await self.store.external_id(trigger.identity_id),
            text=reply.text,
            reply_to_platform_id=trigger.platform_message_id,
        )
        try:
            await sender.send(outbound)
        except DeliveryError as exc:
            log.warning("delivery failed", message_id=reply.id, error=str(exc))
            await self.store.set_delivery(reply.id, Delivery.FAILED, str(exc))
            return
        await self.store.set_delivery(reply.id, Delivery.SENT, None)

    async def resume(self) -> None:
        """After a restart: run the turns a crash cut short."""
        for conversation_id in await self.store.conversations_owing_reply():
            self.runner.request(conversation_id)
        for reply in await self.store.pending_deliveries():
            if reply.reply_to_seq is None:
                continue
            trigger = await self.store.message_at(reply.conversation_id, reply.reply_to_seq)
            if trigger is not None:
                await self.deliver(reply, trigger)
