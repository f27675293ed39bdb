"""A web chat socket's events, from the real hub: in order, bounded, and with no task kept
while none wait (an idle socket is walked by every full garbage collection)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from fastapi import WebSocketDisconnect

from connectors.webchat.socket import Inbox
from gateway.events.hub import QUEUE_LIMIT, DeltaEvent, Event, Hub, Overflow


class _Client:
    """What the socket sent, and a wait for so many sends."""

    def __init__(self) -> None:
        self.sent: list[Event] = []
        self._more = asyncio.Event()

    def took(self, event: Event) -> None:
        self.sent.append(event)
        self._more.set()

    async def has(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.sent) < count:
                self._more.clear()
                await self._more.wait()


async def _idle() -> set[asyncio.Task[object]]:
    """The tasks still running once everything ready to run has run."""
    for _ in range(3):
        await asyncio.sleep(0)
    return {task for task in asyncio.all_tasks() if not task.done()}


async def test_events_go_out_in_order_and_no_task_is_left_once_they_have() -> None:
    hub, conversation = Hub(), uuid.uuid4()
    client = _Client()

    async def send(event: Event) -> None:
        await asyncio.sleep(0)  # a send that yields, as a socket's does
        client.took(event)

    before = await _idle()
    inbox = Inbox(send)
    with hub.attach(conversation, inbox):
        for text in ("a", "b", "c"):
            hub.publish(conversation, DeltaEvent(conversation, text))
        await client.has(3)
        after_burst = await _idle()
        hub.publish(conversation, DeltaEvent(conversation, "d"))  # a new burst, a new task
        await client.has(4)
        await inbox.close()

    assert [e.text for e in client.sent if isinstance(e, DeltaEvent)] == ["a", "b", "c", "d"]
    assert after_burst == before
    assert await _idle() == before


async def test_a_socket_that_cannot_keep_up_gets_an_overflow_in_place_of_what_it_missed() -> None:
    hub, conversation = Hub(), uuid.uuid4()
    client = _Client()
    can_send = asyncio.Event()

    async def send(event: Event) -> None:
        await can_send.wait()  # the client reads nothing meanwhile
        client.took(event)

    inbox = Inbox(send)
    with hub.attach(conversation, inbox):
        for i in range(QUEUE_LIMIT + 3):
            hub.publish(conversation, DeltaEvent(conversation, str(i)))
        can_send.set()
        await client.has(3)
        await inbox.close()

    # What did not fit is replaced by one Overflow (the socket catches up from the
    # database); what came after it follows in order.
    assert client.sent[0] == Overflow()
    assert [e.text for e in client.sent[1:] if isinstance(e, DeltaEvent)] == [
        str(i) for i in range(QUEUE_LIMIT + 1, QUEUE_LIMIT + 3)
    ]
    assert len(client.sent) == 3
    assert inbox.empty()


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (RuntimeError("Cannot call send once a close message has been sent."), False),
        (WebSocketDisconnect(1001), False),
        (ValueError("a bug"), True),
    ],
)
async def test_a_failed_send_ends_the_sending_and_only_a_bug_is_raised_at_the_close(
    failure: Exception, said: bool
) -> None:
    hub, conversation = Hub(), uuid.uuid4()
    tried: list[Event] = []

    async def send(event: Event) -> None:
        tried.append(event)
        raise failure

    before = await _idle()
    inbox = Inbox(send)
    with hub.attach(conversation, inbox):
        hub.publish(conversation, DeltaEvent(conversation, "lost"))
        await _idle()
        hub.publish(conversation, DeltaEvent(conversation, "after"))  # no sending again
        await _idle()
        if said:
            with pytest.raises(type(failure)):
                await inbox.close()
        else:
            await inbox.close()

    assert [e.text for e in tried if isinstance(e, DeltaEvent)] == ["lost"]
    assert await _idle() == before
