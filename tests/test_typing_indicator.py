"""The typing indicator a turn shows while its reply is written (`typing_while`)."""

from __future__ import annotations

import asyncio

from gateway.envelopes import ChatRef
from gateway.turns.presence import typing_while

CHAT = ChatRef(channel="telegram", external_user_id="7777")


class SlowIndicator:
    """A platform that takes its time to answer an indicator: each call waits for
    `answer`."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.answer = asyncio.Event()
        self.answered = 0
        self.cancelled = 0
        self.done = asyncio.Event()

    async def typing(self, chat: ChatRef) -> None:
        self.started.set()
        try:
            await self.answer.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.answered += 1
        self.done.set()


async def test_an_indicator_on_its_way_lands_before_the_turn_goes_on() -> None:
    platform = SlowIndicator()
    order: list[str] = []

    async def turn() -> None:
        async with typing_while(platform, CHAT, interval=60.0, arriving=30.0):
            await platform.started.wait()  # the reply is ready while the indicator is out
        order.append("reply")

    ending = asyncio.create_task(turn())
    await platform.started.wait()
    for _ in range(5):
        await asyncio.sleep(0)  # let the turn reach the end of its block
    order.append("indicator answered")
    platform.answer.set()
    # As soon as it is answered: the next indicator, a minute away, is not waited for.
    await asyncio.wait_for(ending, 5)

    # Not cancelled mid-request (which drops the connection), and answered before the
    # reply could go out after it.
    assert (platform.answered, platform.cancelled) == (1, 0)
    assert order == ["indicator answered", "reply"]


async def test_an_indicator_that_does_not_come_back_holds_the_turn_only_briefly() -> None:
    platform = SlowIndicator()

    async def turn() -> None:
        async with typing_while(platform, CHAT, interval=60.0, arriving=0.05):
            await platform.started.wait()

    await asyncio.wait_for(turn(), 5)

    assert (platform.answered, platform.cancelled) == (0, 1)


async def test_between_indicators_the_turn_ends_at_once() -> None:
    platform = SlowIndicator()
    platform.answer.set()

    async def turn() -> None:
        async with typing_while(platform, CHAT, interval=60.0, arriving=30.0):
            await platform.done.wait()

    # The next indicator is a minute away: nothing to wait for.
    await asyncio.wait_for(turn(), 5)

    assert (platform.answered, platform.cancelled) == (1, 0)
