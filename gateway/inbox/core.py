"""The core, as connectors see it through the port: take a message in, hand a reply out.

A connector calls `receive()` with a verified, normalised message and acknowledges
the platform only after it returns: by then the message is committed. What a channel
can do (split, pace, type, take notices) is read from its `Capabilities`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta

import structlog

from gateway.channels.fetching import Fetcher
from gateway.channels.outbox import Outbox
from gateway.channels.port import Received, Uploaded
from gateway.clock import Clock
from gateway.envelopes import ChatRef, Inbound, InboundFile
from gateway.errors import (
    AccessRefused,
    ConversationEnded,
    InputError,
    LeftUnanswered,
    MediaRefused,
    NotFound,
)
from gateway.events.hub import Ended, Event, Hub, Overflow, Stored, Subscriber
from gateway.inbox.policy import AccessPolicy
from gateway.media.images import process_image
from gateway.metrics import Metrics
from gateway.replicas.leader import Leader, Step
from gateway.replicas.rate_limits import RateLimit, RateLimits
from gateway.text import clean_inbound
from gateway.turns.runner import TurnRunner
from memory.storage.attachments import (
    AttachmentView,
    NewAttachment,
    PlatformFile,
    UploadNotFound,
)
from memory.storage.identities import IdentityRef
from memory.storage.messages import NewMessage, StoredMessage
from memory.storage.models import AttachmentKind, Delivery, Role
from memory.storage.repositories import Repositories
from memory.storage.watermarks import Place

log = structlog.get_logger(__name__)

# How often a waiting request looks in the database for a reply another replica wrote,
# should the event announcing it be lost (Redis down, or not configured).
REPLY_POLL_SECONDS = 5.0


class Core:
    """Plays every role of the port (`CoreRoles`) for every connector."""

    def __init__(
        self,
        *,
        repos: Repositories,
        rate_limits: RateLimits,
        hub: Hub,
        clock: Clock,
        default_timezone: str,
        policy: AccessPolicy,
        runner: TurnRunner,
        outbox: Outbox,
        metrics: Metrics,
        leader_ttl: timedelta,
        replicas: bool,
        fetcher: Fetcher | None = None,
    ) -> None:
        """`replicas`: other processes may answer this one's conversations; `fetcher`:
        where the files platforms hold for messages are fetched (None: they are not)."""
        self._fetcher = fetcher
        self._metrics = metrics
        self._rate_limits = rate_limits
        self._messages = repos.messages
        self._attachments = repos.attachments
        self._conversations = repos.conversations
        self._identities = repos.identities
        self._deliveries = repos.deliveries
        self._leases = repos.leases
        self._watermarks = repos.watermarks
        self._leader_ttl = leader_ttl
        # The singletons this replica's connectors run (and so compete for).
        self.singletons: list[str] = []
        self._reply_poll_seconds = REPLY_POLL_SECONDS if replicas else None
        self.hub = hub
        self._clock = clock
        self._default_timezone = default_timezone
        self._policy = policy
        self._runner = runner
        self._outbox = outbox

    def rate_limit(self, per_minute: int, what: str) -> RateLimit:
        return self._rate_limits.per_minute(per_minute, what)

    @property
    def clock(self) -> Clock:
        return self._clock

    async def identity(self, channel: str, external_id: str, display_name: str = "") -> IdentityRef:
        return await self._identities.resolve_identity(
            channel,
            external_id,
            display_name=display_name,
            timezone=self._default_timezone,
            now=self._clock.now(),
        )

    async def upload(self, identity_id: uuid.UUID, file_name: str, data: bytes) -> Uploaded:
        if not data:
            raise MediaRefused("empty", "the file is empty")
        # Decoding a large photo takes CPU for a while: not on the event loop.
        image = await asyncio.to_thread(process_image, data)
        kept = await self._attachments.upload(
            identity_id,
            NewAttachment(
                kind=AttachmentKind.IMAGE,
                mime=image.mime,
                data=image.data,
                file_name=file_name,
                width=image.width,
                height=image.height,
            ),
            self._clock.now(),
        )
        self._metrics.uploads.labels(kept.kind.value).inc()
        return Uploaded(kept.id, kept.kind.value, kept.mime, kept.size, kept.width, kept.height)

    async def files_of(self, messages: Sequence[StoredMessage]) -> dict[int, list[AttachmentView]]:
        with_files = [message.id for message in messages if message.media]
        return await self._attachments.of_messages(with_files) if with_files else {}

    async def file_for(
        self, identity: IdentityRef, attachment_id: int
    ) -> tuple[AttachmentView, bytes]:
        found = await self._attachments.shown_to(
            attachment_id, identity.identity_id, identity.conversation_id
        )
        if found is None:
            raise NotFound("attachment")
        return found

    async def relabel(self, identity: IdentityRef, display_name: str) -> IdentityRef:
        await self._identities.relabel(identity.identity_id, display_name)
        return dataclasses.replace(identity, display_name=display_name)

    async def receive(
        self, inbound: Inbound, *, awaited: bool = False, sender: IdentityRef | None = None
    ) -> Received:
        """Store a message and start its turn; `AccessRefused` (nothing stored) if the
        channel's policy does not let the sender in, once its answer is sent where the
        channel takes notices; `InputError` if it cannot be stored. `awaited`: the
        sender waits on the line for the reply (the web chat's POST), so the turn is
        what it waits for: it does not count as an arrival that turns make way for.
        `sender`: the sender's identity, just read by the channel (else read here)."""
        with contextlib.nullcontext() if awaited else self._runner.arriving():
            received = await self._store(inbound, sender)
        if received.created and inbound.expects_reply:
            self._runner.request(received.message.conversation_id)
        return received

    async def backfill(self, inbounds: Sequence[Inbound]) -> None:
        """Store what came while nobody listened, then start one turn per conversation:
        a turn started by the first would answer it alone."""
        owed: dict[uuid.UUID, None] = {}
        for inbound in inbounds:
            try:
                received = await self._store(inbound)
            except (AccessRefused, InputError) as exc:  # the refused have been answered
                log.info("skipped a message from a backfill", reason=type(exc).__name__)
                continue
            if received.created and inbound.expects_reply:
                owed[received.message.conversation_id] = None
        for conversation_id in owed:
            self._runner.request(conversation_id)

    async def read_up_to(self, channel: str, place: str, position: int, *, private: bool) -> None:
        await self._watermarks.advance(
            channel, place, position, private=private, now=self._clock.now()
        )

    async def places(self, channel: str, *, within: timedelta) -> list[Place]:
        return await self._watermarks.recent(channel, since=self._clock.now() - within)

    async def _store(self, inbound: Inbound, sender: IdentityRef | None = None) -> Received:
        inbound = clean_inbound(inbound)
        try:
            await self._policy.admit(inbound)
        except AccessRefused as refused:
            if inbound.expects_reply:
                await self._outbox.notify(_chat(inbound), refused.answer)
            raise
        ref = sender or await self.identity(
            inbound.channel, inbound.external_user_id, inbound.display_name
        )
        conversation_id = ref.conversation_id
        if inbound.group_id is not None:
            conversation_id = await self._conversations.group_conversation(
                inbound.channel, inbound.group_id, title=inbound.group_title, now=self._clock.now()
            )
        new = NewMessage(
            role=Role.USER if inbound.expects_reply else Role.EVENT,
            channel=inbound.channel,
            text=inbound.text,
            identity_id=ref.identity_id,
            author_name=inbound.display_name,
            source=inbound.source,
            platform_message_id=inbound.platform_message_id,
            platform_ts=inbound.platform_ts,
            attachment_ids=inbound.attachment_ids,
            platform_files=tuple(_platform_file(file) for file in inbound.files)
            if self._fetcher is not None
            else (),
        )
        try:
            message, created = await self._messages.add_message(
                conversation_id, new, now=self._clock.now()
            )
        except UploadNotFound as missing:
            raise InputError(str(missing)) from None
        if created:
            self._metrics.inbound.labels(inbound.channel).inc()
            if inbound.expects_reply:
                self._outbox.arrived(message, _chat(inbound))
            self.hub.message(message)
            if inbound.files and self._fetcher is not None:
                self._fetcher.fetch(message)
        return Received(message, ref, created)

    async def reply_to(self, received: Received, wait_seconds: float) -> StoredMessage | None:
        """The reply to a received message, waiting up to `wait_seconds` for its turn,
        wherever it runs: here (the runner resolves a future) or on another replica (its
        reply arrives as an event, or, should events be lost, by looking now and then)."""
        message = received.message
        conversation_id, seq = message.conversation_id, message.seq
        future = self._runner.reply_future(conversation_id, seq)
        try:
            with self.hub.subscribe(conversation_id, streaming=False) as events:
                # A message stored just now cannot have its turn finished: `receive`
                # only scheduled it. A redelivered one may have been answered long ago;
                # that is read after subscribing, so a turn ending in between is seen.
                if not received.created:
                    stored = await self._messages.reply_for(conversation_id, seq)
                    if stored is not None:
                        return stored
                async with asyncio.timeout(wait_seconds):
                    while True:
                        event = await self._next(future, events)
                        if isinstance(event, StoredMessage):
                            return event
                        if isinstance(event, Ended):
                            raise ConversationEnded(event.notice)
                        if _may_answer(event, seq):
                            stored = await self._messages.reply_for(conversation_id, seq)
                            if stored is not None:
                                return stored
        except TimeoutError:
            return None
        finally:
            self._runner.forget_future(conversation_id, future)

    async def _next(
        self, future: asyncio.Future[StoredMessage | None], events: asyncio.Queue[Event]
    ) -> StoredMessage | Event | None:
        """This replica's reply, the next event, or None when it is time to look anyway;
        `LeftUnanswered` if this replica's turn gave the message no reply."""
        getting = asyncio.ensure_future(events.get())
        try:
            done, _ = await asyncio.wait(
                (future, getting),
                timeout=self._reply_poll_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            getting.cancel()
        if future in done:
            reply = future.result()
            if reply is None:
                raise LeftUnanswered()
            return reply
        return getting.result() if getting in done else None

    async def history(
        self, conversation_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[StoredMessage]:
        return await self._messages.messages_after(conversation_id, after_seq, limit)

    async def earlier(
        self, conversation_id: uuid.UUID, before_seq: int, limit: int
    ) -> list[StoredMessage]:
        return await self._messages.messages_before(conversation_id, before_seq, limit)

    async def already_stored(self, channel: str, platform_message_id: str) -> StoredMessage | None:
        return await self._messages.by_platform_id(channel, platform_message_id)

    async def seen(self, identity: IdentityRef) -> int:
        return await self._identities.seen_seq(identity.identity_id)

    async def mark_seen(self, identity: IdentityRef, seq: int) -> None:
        await self._identities.mark_seen(identity.identity_id, seq)

    def events(self, conversation_id: uuid.UUID, into: Subscriber) -> AbstractContextManager[None]:
        return self.hub.attach(conversation_id, into)

    async def receipt(
        self, channel: str, platform_id: str, status: Delivery, error: str | None
    ) -> bool:
        """A platform's delivery report on a message we sent; False if it is not ours."""
        return await self._deliveries.receipt(
            channel, platform_id, status, error, now=self._clock.now()
        )

    async def group_moved(self, channel: str, old_group_id: str, new_group_id: str) -> None:
        if not await self._conversations.move_group(channel, old_group_id, new_group_id):
            log.warning("a moved group kept its conversation", channel=channel)

    def singleton(
        self, name: str, start: Step, stop: Step, *, state: Callable[[], str] | None = None
    ) -> Leader:
        leader = Leader(self._leases, name, start, stop, ttl=self._leader_ttl, state=state)
        self.singletons.append(leader.name)
        leader.begin()
        return leader

    async def resume(self) -> None:
        """Start a turn wherever a reply is owed: after a restart, the turns a crash cut
        short; on any replica, those of a replica that died. Each turn claims its
        conversation's lease, so one that is being answered elsewhere is left alone."""
        after = None
        while page := await self._conversations.conversations_owing_reply(after=after):
            for conversation_id in page:
                self._runner.request(conversation_id)
            after = page[-1]


def _may_answer(event: StoredMessage | Event | None, seq: int) -> bool:
    """Whether the reply to `seq` may be in the database now: another replica stored
    it, events were lost, or it is time to look anyway (None)."""
    if isinstance(event, Stored):
        return event.answers is not None and event.answers >= seq
    return event is None or isinstance(event, Overflow)


def _chat(inbound: Inbound) -> ChatRef:
    return ChatRef(
        channel=inbound.channel,
        external_user_id=inbound.external_user_id,
        group_id=inbound.group_id,
        platform_message_id=inbound.platform_message_id,
    )


def _platform_file(file: InboundFile) -> PlatformFile:
    try:
        kind = AttachmentKind(file.kind)
    except ValueError:
        kind = AttachmentKind.OTHER
    return PlatformFile(kind, file.ref, file.file_name, file.mime, file.duration)
