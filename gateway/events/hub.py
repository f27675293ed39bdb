"""Fan-out of conversation events to live subscribers (web chat sockets) in this
process; with Redis, `fanout.RedisFanout` carries them to the other replicas too.

Each subscriber has a bounded queue; one that falls too far behind is dropped and
must resume from its last seq, so a slow client never holds up a turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from memory.storage.messages import StoredMessage

QUEUE_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class MessageEvent:
    message: StoredMessage


@dataclass(frozen=True, slots=True)
class DeltaEvent:
    conversation_id: uuid.UUID
    text: str


@dataclass(frozen=True, slots=True)
class Typing:
    """The model has been asked for a reply; its first delta has yet to come."""

    conversation_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class Stored:
    """Another replica stored message `seq` (a reply to user messages up to `answers`):
    read it from the database."""

    conversation_id: uuid.UUID
    seq: int
    answers: int | None = None


@dataclass(frozen=True, slots=True)
class DeliveryChanged:
    """Stored message `seq` changed its delivery (sent, failed, sent again): whoever
    shows it (the dashboard) reads it again."""

    conversation_id: uuid.UUID
    seq: int


@dataclass(frozen=True, slots=True)
class Ended:
    """The conversation is gone (erased, or deleted by an operator): `notice` says so to
    whoever is still connected to it, the last word it gets."""

    conversation_id: uuid.UUID
    notice: str


@dataclass(frozen=True, slots=True)
class Overflow:
    """Sent in place of events a subscriber was too slow to take (or that a lost link to
    the other replicas may have dropped): catch up from the database."""


Event = MessageEvent | DeltaEvent | Typing | Stored | DeliveryChanged | Ended | Overflow

# Where this replica's events go besides its own subscribers (other replicas).
Forward = Callable[[uuid.UUID, Event], None]


class Interest(Protocol):
    """Told which conversations have subscribers here: the fan-out then hears from the
    other replicas about those only. Called synchronously, from inside `subscribe`."""

    def wanted(self, conversation_id: uuid.UUID) -> None:
        """The conversation got its first subscriber here."""

    def unwanted(self, conversation_id: uuid.UUID) -> None:
        """Its last subscriber here left."""


class Subscriber(Protocol):
    """Where a subscriber's events go: an `asyncio.Queue`, or anything that takes them as
    one does (`put_nowait` raises `asyncio.QueueFull` past its bound), such as a web
    chat socket's, which keeps no task waiting while no event does."""

    def put_nowait(self, item: Event) -> None: ...

    def get_nowait(self) -> Event: ...

    def empty(self) -> bool: ...


# What a reply is streamed as: a subscriber waiting only for what is stored skips them.
_STREAMING = (DeltaEvent, Typing)


class Hub:
    def __init__(self) -> None:
        self._subscribers: defaultdict[uuid.UUID, set[Subscriber]] = defaultdict(set)
        self._unstreamed: set[Subscriber] = set()
        self._forward: Forward | None = None
        self._interest: Interest | None = None

    def forward_to(self, forward: Forward) -> None:
        """Also hand every event published here to `forward` (the fan-out to replicas)."""
        self._forward = forward

    def watch(self, interest: Interest) -> None:
        """Tell `interest` of the conversations with subscribers, now and from now on."""
        self._interest = interest
        for conversation_id in self._subscribers:
            interest.wanted(conversation_id)

    @contextlib.contextmanager
    def subscribe(
        self, conversation_id: uuid.UUID, *, streaming: bool = True
    ) -> Iterator[asyncio.Queue[Event]]:
        """The conversation's events from now on; without `streaming`, none of a reply
        being written (its deltas, typing): a reply streams hundreds of them."""
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=QUEUE_LIMIT)
        with self.attach(conversation_id, queue, streaming=streaming):
            yield queue

    @contextlib.contextmanager
    def attach(
        self, conversation_id: uuid.UUID, subscriber: Subscriber, *, streaming: bool = True
    ) -> Iterator[None]:
        """`subscribe`, into a subscriber of the caller's."""
        first = conversation_id not in self._subscribers
        self._subscribers[conversation_id].add(subscriber)
        if not streaming:
            self._unstreamed.add(subscriber)
        if first and self._interest is not None:
            self._interest.wanted(conversation_id)
        try:
            yield
        finally:
            self._unstreamed.discard(subscriber)
            subscribers = self._subscribers[conversation_id]
            subscribers.discard(subscriber)
            if not subscribers:
                del self._subscribers[conversation_id]
                if self._interest is not None:
                    self._interest.unwanted(conversation_id)

    def publish(self, conversation_id: uuid.UUID, event: Event) -> None:
        if self._forward is not None:
            self._forward(conversation_id, event)
        self.deliver(conversation_id, event)

    def deliver(self, conversation_id: uuid.UUID, event: Event) -> None:
        """Hand an event to this replica's subscribers only."""
        streamed = isinstance(event, _STREAMING)
        for queue in self._subscribers.get(conversation_id, ()):
            if streamed and queue in self._unstreamed:
                continue
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                _replace_with_overflow(queue)

    def message(self, message: StoredMessage) -> None:
        self.publish(message.conversation_id, MessageEvent(message))

    def overflow(self, conversation_id: uuid.UUID) -> None:
        """The conversation's subscribers catch up from the database (events of it may
        have been lost). After what they hold already: that stays theirs, in order."""
        for queue in self._subscribers.get(conversation_id, ()):
            try:
                queue.put_nowait(Overflow())
            except asyncio.QueueFull:
                _replace_with_overflow(queue)


def _replace_with_overflow(queue: Subscriber) -> None:
    while not queue.empty():
        queue.get_nowait()
    queue.put_nowait(Overflow())
