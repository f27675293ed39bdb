"""Where a stored reply goes: the connector of its channel, in the chat it answers.

The turn runner hands every reply here once it is stored; presence (typing) and
notices (refusals, pairing codes) go out through the same connectors.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import cast

import structlog

from gateway.channels.delivery import DeliveryLoop
from gateway.channels.port import Connector
from gateway.channels.previews import Drafting, Editing, EditPreview, drafting, editing
from gateway.envelopes import ChatRef, Outbound
from gateway.errors import DeliveryError
from gateway.metrics import Metrics
from gateway.turns.presence import NO_PREVIEW, Preview, typing_while
from memory.provenance import is_firing
from memory.storage.messages import StoredMessage
from memory.storage.previews import PreviewPlace
from memory.storage.repositories import Repositories

log = structlog.get_logger(__name__)

# More than the turns one process runs at once, with the messages that arrived for turns
# still to run (or run on another replica).
TURN_CHATS_KEPT = 4096


class Outbox:
    def __init__(
        self,
        connectors: Sequence[Connector],
        repos: Repositories,
        delivery: DeliveryLoop,
        *,
        stream_interval: float = 0.75,
        metrics: Metrics | None = None,
    ) -> None:
        self._senders = {connector.channel: connector for connector in connectors}
        self._stream_interval = stream_interval
        self._metrics = metrics or Metrics()
        self._messages = repos.messages
        self._identities = repos.identities
        self._deliveries = repos.deliveries
        self._previews = repos.previews
        self._delivery = delivery
        # Where each message that starts a turn came from, as its channel said (or as the
        # turn's presence read it), kept for the turn's presence and its reply's
        # delivery: a turn reads its address at most once. Taken by `deliver`; bounded
        # for turns that fail, or run on another replica.
        self._turn_chats: OrderedDict[int, ChatRef] = OrderedDict()

    def delivered_by_storing(self, channel: str) -> bool:
        sender = self._senders.get(channel)
        return sender is not None and sender.capabilities.delivered_by_storing

    async def deliver(self, reply: StoredMessage, trigger: StoredMessage) -> None:
        """Send a stored reply through the channel of the message that started the turn."""
        sender = self._senders.get(reply.channel)
        if sender is not None and sender.capabilities.delivered_by_storing:
            # Only the address matters.
            chat = ChatRef(reply.channel, await self._identities.external_id(trigger.identity_id))
            await self._submit(reply, trigger, chat)
            return
        chat = self._chat_kept(trigger) or await self.chat_of(trigger)
        self._turn_chats.pop(trigger.id, None)  # the turn is done with it
        # Stored just now and never tried; fresh unless a preview may show it, which
        # only a channel that edits does, and never where it shows a draft instead.
        caps = None if sender is None else sender.capabilities
        fresh = caps is not None and (not caps.edits or (caps.drafts and chat.group_id is None))
        await self._submit(reply, trigger, chat, fresh=fresh)

    def arrived(self, message: StoredMessage, chat: ChatRef) -> None:
        """`message`, just stored, came from `chat`: its turn answers there without
        reading the address back (`chat_of` reads what `chat` says)."""
        sender = self._senders.get(message.channel)
        if sender is not None and not sender.capabilities.delivered_by_storing:
            self._keep_chat(message.id, chat)

    def _chat_kept(self, trigger: StoredMessage) -> ChatRef | None:
        """The chat kept for `trigger`, if it is its own: its platform id says so (on
        SQLite a message's id is used again once the newest rows are erased, and a
        message with no platform id, a reminder's, may get one kept for another)."""
        kept = self._turn_chats.get(trigger.id)
        if (
            kept is None
            or trigger.platform_message_id is None
            or (kept.channel, kept.platform_message_id)
            != (trigger.channel, trigger.platform_message_id)
        ):
            return None
        return kept

    def _keep_chat(self, message_id: int, chat: ChatRef) -> None:
        self._turn_chats[message_id] = chat
        self._turn_chats.move_to_end(message_id)
        if len(self._turn_chats) > TURN_CHATS_KEPT:
            self._turn_chats.popitem(last=False)

    async def send_unprompted(self, message: StoredMessage, chat: ChatRef) -> None:
        """Send a stored message that answers nothing (an operator's) to `chat`."""
        if not self.delivered_by_storing(message.channel):
            await self._submit(message, None, chat)

    async def _submit(
        self,
        reply: StoredMessage,
        trigger: StoredMessage | None,
        chat: ChatRef,
        *,
        fresh: bool = False,
    ) -> None:
        sender = self._senders.get(reply.channel)
        if sender is None:
            await self._deliveries.attempt_failed(
                reply.id, f"no {reply.channel} connector is configured", final=True
            )
            return
        outbound = Outbound(
            message_id=reply.id,
            channel=reply.channel,
            external_user_id=chat.external_user_id,
            text=reply.text,
            reply_to_platform_id=None if trigger is None else trigger.platform_message_id,
            group_id=chat.group_id,
            reply_to_sent_at=None if trigger is None else trigger.sent_at,
            reminder=trigger is not None and is_firing(trigger.source),
        )
        await self._delivery.submit(outbound, sender, fresh=fresh)

    async def notify(self, chat: ChatRef, text: str) -> None:
        """A gateway answer that is not stored (a refusal, a pairing code), where the
        channel takes notices."""
        sender = self._senders.get(chat.channel)
        if sender is None or not sender.capabilities.notices:
            return
        try:
            await sender.notify(chat, text)
        except DeliveryError as exc:
            log.warning("could not send a notice", channel=chat.channel, error=exc.reason)

    async def chat_of(self, message: StoredMessage) -> ChatRef:
        """Where an answer to `message` goes: its group, or its author's private chat."""
        external_user_id, group_id = await self._deliveries.address(
            message.conversation_id, message.identity_id
        )
        return ChatRef(
            channel=message.channel,
            external_user_id=external_user_id,
            group_id=group_id,
            platform_message_id=message.platform_message_id,
        )

    @contextlib.asynccontextmanager
    async def working(self, trigger: StoredMessage) -> AsyncIterator[Preview]:
        """While a turn answering `trigger` runs: a typing indicator where the channel
        has one, and the answer as it is written where the channel shows it: a draft
        (private chats), or one message edited as it grows (where that is on)."""
        sender = self._senders.get(trigger.channel)
        interval = None if sender is None else sender.capabilities.typing_interval
        if sender is None or interval is None:
            yield NO_PREVIEW
            return
        chat = self._chat_kept(trigger) or await self.chat_of(trigger)
        self._keep_chat(trigger.id, chat)
        caps = sender.capabilities
        async with typing_while(sender, chat, interval):
            if caps.drafts and chat.group_id is None:
                drafts = cast(Drafting, sender)
                async with drafting(drafts, chat, self._stream_interval, self._metrics) as shown:
                    yield shown
            elif caps.stream_edits:
                async with editing(
                    self._edit_preview(sender, chat, trigger), self._delivery.previewed
                ) as shown:
                    yield shown
            else:
                yield NO_PREVIEW

    def _edit_preview(
        self, sender: Connector, chat: ChatRef, trigger: StoredMessage
    ) -> EditPreview:
        place = PreviewPlace(
            trigger.conversation_id,
            trigger.seq,
            chat.channel,
            chat.group_id or chat.external_user_id,
        )

        async def penalty(seconds: float) -> None:
            await self._delivery.penalty(sender, chat, seconds)

        return EditPreview(
            cast(Editing, sender),
            chat,
            place,
            self._previews,
            penalty,
            self._stream_interval,
            self._metrics,
        )

    async def resume(self, only: int | None = None) -> None:
        """Submit every stored reply still to send (`only`: that one message): after a
        restart, those a crash kept from going out; on any replica, those of a replica
        that died, or that waited for a lane another replica worked. Each lane is
        worked by one replica."""
        after_id = 0
        while page := await self._messages.pending_replies(after_id=after_id, only=only):
            for pending in page:
                trigger = pending.trigger
                chat = ChatRef(
                    channel=pending.reply.channel,
                    external_user_id=pending.external_user_id,
                    group_id=pending.group_id,
                    platform_message_id=None if trigger is None else trigger.platform_message_id,
                )
                await self._submit(pending.reply, trigger, chat)
            after_id = page[-1].reply.id

    async def retry(self, message_id: int) -> StoredMessage | None:
        """Send a failed reply again, from its first part the platform did not take;
        None if it is not a failed delivery. Answers the reply as it stands once
        resubmitted: sent already where the channel sends inline, else pending."""
        again = await self._deliveries.send_again(message_id)
        if again is None:
            return None
        self._delivery.announce(again)  # pending again, wherever it is shown
        await self.resume(only=message_id)
        return await self._messages.message_by_id(message_id)

    @property
    def busy(self) -> bool:
        return self._delivery.busy

    async def close(self, deadline: float) -> None:
        await self._delivery.close(deadline)
