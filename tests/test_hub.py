"""The hub hands each subscriber the events it asked for."""

from __future__ import annotations

import asyncio
import uuid

from gateway.events.hub import DeltaEvent, Event, Hub, Overflow, Stored, Typing


def _drain(queue: asyncio.Queue[Event]) -> list[Event]:
    return [queue.get_nowait() for _ in range(queue.qsize())]


async def test_a_subscriber_not_streaming_gets_what_is_stored_and_none_of_the_writing() -> None:
    hub, conversation = Hub(), uuid.uuid4()
    events: list[Event] = [
        Typing(conversation),
        DeltaEvent(conversation, "Hel"),
        DeltaEvent(conversation, "lo"),
        Stored(conversation, 4, answers=3),
    ]
    with (
        hub.subscribe(conversation) as streaming,
        hub.subscribe(conversation, streaming=False) as waiting,
    ):
        for event in events:
            hub.publish(conversation, event)
        hub.overflow(conversation)
        assert _drain(streaming) == [*events, Overflow()]
        assert _drain(waiting) == [events[-1], Overflow()]
