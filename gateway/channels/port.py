"""The port between the core and a channel connector, both ways.

The core plays a few small roles for connectors (`Receiving`, `Watermarks`,
`History`, …); a connector declares the ones it uses by the type its `start` takes,
and sees nothing else of the core. The core sees `Connector` and reads what a channel
can do from its `Capabilities`, never by probing the object. The storage views a connector reads through the port
(`IdentityRef`, `StoredMessage`, `Delivery`) are named here so a connector never
imports storage itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gateway.clock import Clock
from gateway.envelopes import ChatRef, Inbound, Outbound
from gateway.events.hub import Subscriber
from gateway.replicas.rate_limits import RateLimit
from memory.storage.attachments import AttachmentView
from memory.storage.identities import IdentityRef
from memory.storage.messages import StoredMessage
from memory.storage.models import Delivery
from memory.storage.watermarks import Place

if TYPE_CHECKING:
    from fastapi import APIRouter
    from starlette.websockets import WebSocket

Step = Callable[[], Awaitable[None]]

__all__ = [
    "NO_SOCKETS",
    "Capabilities",
    "Clocked",
    "Connector",
    "CoreRoles",
    "Delivery",
    "Diagnoses",
    "Finding",
    "GroupMoves",
    "History",
    "Identities",
    "IdentityRef",
    "Limits",
    "LiveEvents",
    "Pace",
    "Place",
    "Receipts",
    "Received",
    "Receiving",
    "Singleton",
    "Singletons",
    "SocketEndpoint",
    "StoredMessage",
    "Watermarks",
    "Webhooks",
]


@dataclass(frozen=True, slots=True)
class Pace:
    """At most one send per `interval` seconds for everything sharing `key`."""

    key: Hashable
    interval: float


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a channel can do, as data."""

    # The longest message the platform takes, as `measure` counts; None: no limit, and
    # no lane either: storing a reply delivers it (clients read the database).
    max_length: int | None = None
    measure: Callable[[str], int] = len
    # Seconds between typing indicators (a little under how long one shows); None: none.
    typing_interval: float | None = None
    # Whether a sent message can be edited in place: a reply's first part is then
    # edited into the message that previewed it (`Outbound.replaces`).
    edits: bool = False
    # Whether a reply is shown while it is written in one message, edited as it grows
    # (`gateway.channels.previews.Editing`; where there are no drafts).
    stream_edits: bool = False
    # Whether a reply can be shown as a draft while it is written (private chats;
    # `gateway.channels.previews.Drafting`).
    drafts: bool = False
    # Whether the core answers a refused person through `notify`; False where the
    # connector answers the request itself (the web chat's HTTP and socket replies).
    notices: bool = True
    # How long after the person last wrote the platform takes free text (WhatsApp: 24
    # hours); None: any time.
    free_text_window: timedelta | None = None
    # Whether a reminder may still go out past that window (an approved template).
    reminders_past_window: bool = False

    @property
    def delivered_by_storing(self) -> bool:
        return self.max_length is None


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of `parley doctor`: what was checked, whether it is well, and if not,
    what to do about it. Never holds a secret."""

    name: str
    ok: bool
    detail: str


@runtime_checkable
class Diagnoses(Protocol):
    """A connector that can check its credentials and set-up against its platform,
    without starting (`parley doctor`)."""

    async def diagnose(self) -> list[Finding]: ...


@runtime_checkable
class FetchesFiles(Protocol):
    """A connector whose platform holds the files people send (`Inbound.files`)."""

    async def fetch_file(self, ref: str, limit: int) -> bytes:
        """The file's bytes. `MediaRefused("too_large")` past `limit` bytes (read no
        further than that); `FileUnavailable` if the platform does not give it."""
        ...


@runtime_checkable
class Webhooks(Protocol):
    """A connector whose platform is told where to post (`parley telegram webhook …`);
    each answers a line for the operator, or raises `ConfigError` saying what to fix."""

    async def register_webhook(self) -> str: ...

    async def describe_webhook(self) -> str: ...

    async def remove_webhook(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Received:
    message: StoredMessage
    identity: IdentityRef
    # False when the platform redelivered a message we already had.
    created: bool


class Receiving(Protocol):
    """Taking a platform's messages in: every connector plays this role."""

    async def receive(
        self, inbound: Inbound, *, awaited: bool = False, sender: IdentityRef | None = None
    ) -> Received:
        """Store a verified, normalised message and start its turn; acknowledge the
        platform only after this returns. `AccessRefused` (nothing stored) if the
        channel's policy does not let the sender in: the core has already sent the
        answer where the channel takes notices. `InputError` if it cannot be stored.
        `awaited`: the sender waits on the line for the reply (turns make way for
        the other arrivals, not for this one). `sender`: the sender's identity, where
        the channel has just read it (`identity`); else it is read here."""
        ...


@dataclass(frozen=True, slots=True)
class Uploaded:
    """A file kept for a message the uploader sends next (`Inbound.attachment_ids`)."""

    id: int
    kind: str  # image (for now: the only kind an upload may be)
    mime: str  # as sniffed from the bytes, after processing
    size: int  # of what is kept
    width: int | None
    height: int | None


class Uploading(Protocol):
    """Files a person uploads before the message that carries them (web chat)."""

    async def upload(self, identity_id: uuid.UUID, file_name: str, data: bytes) -> Uploaded:
        """Read and keep `data` (decoded off the event loop); `MediaRefused` with the
        reason if it is not kept."""
        ...

    async def files_of(self, messages: Sequence[StoredMessage]) -> dict[int, list[AttachmentView]]:
        """The files of those of `messages` that have any, by message id."""
        ...

    async def file_for(
        self, identity: IdentityRef, attachment_id: int
    ) -> tuple[AttachmentView, bytes]:
        """A file the identity may read (its own upload, or one sent in its
        conversation) and its bytes; `NotFound` otherwise, whether or not it exists."""
        ...


class Clocked(Protocol):
    """The core's clock, so a connector's idea of now is the turns' (and a test's)."""

    @property
    def clock(self) -> Clock: ...


class Singletons(Protocol):
    """Work that must run on one replica at a time (one poller, one connection a bot)."""

    def singleton(
        self, name: str, start: Step, stop: Step, *, state: Callable[[], str] | None = None
    ) -> Singleton:
        """Run `start` on exactly one replica at a time (`stop` when it stops leading):
        long polling, a gateway connection. Begins when made; `close()` it on stop.
        `state`: what the work says of itself ("connected"), kept where every replica
        reads it (the dashboard's health page) each time the lease is renewed."""
        ...


class Limits(Protocol):
    """How often a client may do something, held for the whole deployment (every
    replica spends from one allowance where Redis is configured)."""

    def rate_limit(self, per_minute: int, what: str) -> RateLimit:
        """A limit of `per_minute` `what` a minute per key; `what` names it in refusals."""
        ...


class Watermarks(Protocol):
    """How far each chat of a platform was read, kept in the database, and storing what
    was said there while no connection heard it: catching up after a reconnect."""

    async def read_up_to(self, channel: str, place: str, position: int, *, private: bool) -> None:
        """Every message of `place` (a chat on the platform) up to `position` is stored,
        or was seen and left alone; `private`: a direct chat with one person."""
        ...

    async def places(self, channel: str, *, within: timedelta) -> list[Place]:
        """The chats of a channel read from within `within`, with how far each was read."""
        ...

    async def backfill(self, inbounds: Sequence[Inbound]) -> None:
        """Store messages that came while no connection heard them (a platform's history
        after a reconnect), as `receive` would; each conversation then gets one turn
        for all of its messages. Refused and unstorable ones are skipped."""
        ...


class Receipts(Protocol):
    """A platform's delivery reports on what the core sent."""

    async def receipt(
        self, channel: str, platform_id: str, status: Delivery, error: str | None
    ) -> bool:
        """A platform's delivery report on a message we sent; False if it is not ours."""
        ...


class GroupMoves(Protocol):
    """A platform giving a group a new id."""

    async def group_moved(self, channel: str, old_group_id: str, new_group_id: str) -> None:
        """A group now has another id on its platform: its conversation (and the
        replies still to send there) follows."""
        ...


class Identities(Protocol):
    """A person on a channel, for a connector that signs people in itself: who they
    are, what they go by, and how far they have read."""

    async def identity(self, channel: str, external_id: str, display_name: str = "") -> IdentityRef:
        """The identity of `external_id` on `channel`, with its person and conversation;
        made on first contact, labelled `display_name` (which says nothing otherwise)."""
        ...

    async def relabel(self, identity: IdentityRef, display_name: str) -> IdentityRef:
        """The identity goes by `display_name` from now on (the platform said so); so do
        its person and their conversation, where they went by its old label."""
        ...

    async def seen(self, identity: IdentityRef) -> int:
        """How far this identity has read its conversation (a seq; 0: nothing)."""
        ...

    async def mark_seen(self, identity: IdentityRef, seq: int) -> None:
        """This identity has read its conversation up to `seq` (kept if further)."""
        ...


class History(Protocol):
    """Reading a conversation's stored messages, for a connector whose clients read
    them (rather than being sent each one)."""

    async def history(
        self, conversation_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[StoredMessage]:
        """Up to `limit` messages after `after_seq`, oldest first."""
        ...

    async def earlier(
        self, conversation_id: uuid.UUID, before_seq: int, limit: int
    ) -> list[StoredMessage]:
        """The `limit` messages just before `before_seq`, oldest first."""
        ...

    async def already_stored(self, channel: str, platform_message_id: str) -> StoredMessage | None:
        """The message of this platform id, if one was stored (a redelivery), else None."""
        ...


class LiveEvents(Protocol):
    """What a conversation does next, as it happens: its events, and the reply to one
    message."""

    def events(self, conversation_id: uuid.UUID, into: Subscriber) -> AbstractContextManager[None]:
        """New messages and reply deltas of a conversation, put `into` the subscriber
        while the context is open."""
        ...

    async def reply_to(self, received: Received, wait_seconds: float) -> StoredMessage | None:
        """The reply to a received message, waiting up to `wait_seconds` for its turn;
        `ConversationEnded` if the conversation is erased meanwhile (say, by this very
        message: `/erase CODE`); `LeftUnanswered` if its turn gives it no reply."""
        ...


class CoreRoles(
    Receiving,
    Clocked,
    Singletons,
    Watermarks,
    Receipts,
    GroupMoves,
    Identities,
    History,
    LiveEvents,
    Limits,
    Uploading,
    Protocol,
):
    """Every role the core plays, as one: what `Connector.start` is handed. A connector
    types its own `start` with only the roles it uses (an intersection of the roles
    above, in its own module), so the type checker proves it uses nothing else."""


# A WebSocket endpoint of a connector: handed the socket, it serves it for its life.
SocketEndpoint = Callable[["WebSocket"], Awaitable[None]]
NO_SOCKETS: Mapping[str, SocketEndpoint] = MappingProxyType({})


class Singleton(Protocol):
    async def close(self) -> None: ...


class Connector(Protocol):
    channel: str
    capabilities: Capabilities

    @property
    def router(self) -> APIRouter | None:
        """HTTP routes the connector serves (webhooks, widget), if any."""
        ...

    @property
    def sockets(self) -> Mapping[str, SocketEndpoint]:
        """WebSocket endpoints by path (`NO_SOCKETS`: none), served beside the router
        (`gateway.http.sockets`)."""
        ...

    async def start(self, core: CoreRoles) -> None:
        """Start taking messages (webhooks are routed, polling begins) and hand them to
        `core`; built before, a connector only learns of the core here."""
        ...

    async def stop(self) -> None: ...

    async def send(self, outbound: Outbound) -> str | None:
        """Deliver a reply (or one part of it); return the platform's id for it, if any.

        Raise `DeliveryError` if the platform refused it (`Undeliverable` if retrying
        cannot help)."""
        ...

    def pacing(self, outbound: Outbound) -> Sequence[Pace]:
        """The rate limits a send to this chat shares with others."""
        ...

    async def typing(self, chat: ChatRef) -> None:
        """Show a typing indicator (called only with `capabilities.typing_interval`)."""
        ...

    async def notify(self, chat: ChatRef, text: str) -> None:
        """Send a gateway answer that is not stored (a refusal, a pairing code); called
        only with `capabilities.notices`. Raise `DeliveryError` on failure."""
        ...
