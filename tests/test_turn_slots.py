"""Turn slots: at most `size` turns work at once; one waiting on the model lends its
slot; a turn stopped meanwhile gives back exactly what it held. Turns and background
jobs wait for a pause in arriving messages, never longer than the patience."""

from __future__ import annotations

import asyncio
import contextlib

from gateway.jobs.queue import EmbeddedQueue
from gateway.turns.slots import Arrivals, TurnSlots


async def _hold(slots: TurnSlots, started: asyncio.Event, done: asyncio.Event) -> None:
    async with slots.taken():
        started.set()
        await done.wait()


async def test_a_third_turn_waits_for_a_slot_that_one_on_the_model_lends() -> None:
    slots = TurnSlots(2)
    a_in, a_done = asyncio.Event(), asyncio.Event()
    b_in, b_done = asyncio.Event(), asyncio.Event()
    on_model, model_done = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def turn_on_the_model() -> None:
        async with slots.taken() as slot:
            async with slot.lent():
                on_model.set()
                await model_done.wait()
            order.append("the model's turn works again")

    async def first_turn() -> None:
        await _hold(slots, a_in, a_done)
        order.append("the first turn gave its slot back")

    model_turn = asyncio.create_task(turn_on_the_model())
    await on_model.wait()  # took a slot and lent it
    first = asyncio.create_task(first_turn())
    second = asyncio.create_task(_hold(slots, b_in, b_done))
    await asyncio.gather(a_in.wait(), b_in.wait())  # both work meanwhile
    assert slots.in_use == 2
    # The model answers first: were its turn to work on without a slot, it would say
    # so before the first turn, woken after it, gave one back.
    model_done.set()
    a_done.set()
    await asyncio.wait_for(asyncio.gather(model_turn, first), 5)
    b_done.set()
    await second
    assert order == ["the first turn gave its slot back", "the model's turn works again"]
    assert slots.in_use == 0


async def test_a_turn_stopped_while_the_model_writes_needs_no_slot_to_stop() -> None:
    slots = TurnSlots(1)
    on_model, other_in, other_done = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def turn() -> None:
        async with slots.taken() as slot, slot.lent():
            on_model.set()
            await asyncio.Event().wait()  # a model that never answers

    stopped = asyncio.create_task(turn())
    await on_model.wait()
    other = asyncio.create_task(_hold(slots, other_in, other_done))
    await other_in.wait()  # the lent slot is in use by another
    stopped.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(stopped, 5)  # at once, without waiting for the slot
    assert slots.in_use == 1
    other_done.set()
    await other
    assert slots.in_use == 0


async def test_a_turn_waits_while_messages_arrive_and_goes_once_they_stop() -> None:
    slots = TurnSlots(2, Arrivals(quiet=0.05, patience=30))
    arrived = slots.arrivals.arriving()
    arrived.__enter__()
    started = asyncio.Event()
    turn = asyncio.create_task(_hold(slots, started, asyncio.Event()))
    await asyncio.sleep(0)  # the turn has asked for its slot
    with slots.arrivals.arriving():  # another arrival meanwhile
        await asyncio.sleep(0)
    assert not started.is_set()
    arrived.__exit__(None, None, None)
    # Quiet once no arrival has been stored for `quiet` seconds: the turn goes then,
    # not while an acknowledgement is still owed.
    before = asyncio.get_running_loop().time()
    await asyncio.wait_for(started.wait(), 5)
    assert asyncio.get_running_loop().time() - before >= 0.05
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    assert slots.in_use == 0


async def test_arrivals_that_never_stop_hold_a_turn_no_longer_than_the_patience() -> None:
    slots = TurnSlots(1, Arrivals(quiet=0.05, patience=0.2))
    stop = asyncio.Event()

    async def arrivals() -> None:
        while not stop.is_set():
            with slots.arrivals.arriving():
                await asyncio.sleep(0.01)

    arriving = asyncio.create_task(arrivals())
    await asyncio.sleep(0.02)
    started = asyncio.Event()
    before = asyncio.get_running_loop().time()
    turn = asyncio.create_task(_hold(slots, started, asyncio.Event()))
    await asyncio.wait_for(started.wait(), 5)
    assert 0.2 <= asyncio.get_running_loop().time() - before < 2
    stop.set()
    await arriving
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await turn


async def test_a_turn_stopped_while_waiting_for_quiet_gives_its_slot_back() -> None:
    slots = TurnSlots(1, Arrivals(quiet=0.05, patience=30))
    with slots.arrivals.arriving():
        waiting = asyncio.create_task(_hold(slots, asyncio.Event(), asyncio.Event()))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
    started = asyncio.Event()
    other = asyncio.create_task(_hold(slots, started, asyncio.Event()))
    await asyncio.wait_for(started.wait(), 5)  # the slot was not kept by the stopped one
    assert slots.in_use == 1
    other.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await other


class _Jobs:
    def __init__(self) -> None:
        self.ran = asyncio.Event()

    async def run(self, job: str, arg: str) -> None:
        self.ran.set()

    async def sweep(self) -> int:
        return 0


async def test_the_embedded_job_runner_waits_for_the_same_pause() -> None:
    arrivals = Arrivals(quiet=0.05, patience=30)
    queue = EmbeddedQueue(concurrency=1, sweep_every=3600, pause=arrivals.pause)
    jobs = _Jobs()
    await queue.start(jobs)
    try:
        with arrivals.arriving():
            await queue.enqueue("summarize", "1", key="summarize:1")
            await asyncio.sleep(0.1)
            assert not jobs.ran.is_set()  # a message is being stored
        await asyncio.wait_for(jobs.ran.wait(), 5)
    finally:
        await queue.close()


async def test_a_message_on_its_own_keeps_no_turn_waiting() -> None:
    slots = TurnSlots(1, Arrivals(quiet=5, patience=30))
    with slots.arrivals.arriving():
        pass
    started = asyncio.Event()
    turn = asyncio.create_task(_hold(slots, started, asyncio.Event()))
    await asyncio.wait_for(started.wait(), 1)  # not the 5 s a burst would wait
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await turn
