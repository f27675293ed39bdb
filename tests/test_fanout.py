"""The fan-out between replicas, over a real Redis: who hears whose events."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

from redis.asyncio.connection import parse_url

from gateway.events.fanout import RedisFanout
from gateway.events.hub import DeltaEvent, Event, Hub
from tests.support.redis import fresh_redis


@contextlib.asynccontextmanager
async def _replica(redis_url: str) -> AsyncIterator[Hub]:
    hub = Hub()
    fanout = RedisFanout(hub, redis_url)
    await fanout.start()
    try:
        await asyncio.wait_for(fanout.listening.wait(), 10)
        yield hub
    finally:
        await fanout.close()


async def _next(queue: asyncio.Queue[Event]) -> Event:
    return await asyncio.wait_for(queue.get(), 10)


async def test_instances_on_other_redis_databases_do_not_hear_each_other() -> None:
    # Pub/sub ignores the database number: two Parley instances sharing a Redis server
    # on databases 13 and 14 heard each other's events (and decoded every token).
    ours = await fresh_redis()
    db = int(parse_url(ours).get("db", 0))
    theirs = ours.rsplit("/", 1)[0] + f"/{(db + 1) % 16}"
    conversation = uuid.uuid4()
    async with (
        _replica(ours) as a,
        _replica(ours) as b,
        _replica(theirs) as c,
        _replica(theirs) as d,
    ):
        with b.subscribe(conversation) as heard_by_b, c.subscribe(conversation) as heard_by_c:
            a.publish(conversation, DeltaEvent(conversation, "from a"))
            assert await _next(heard_by_b) == DeltaEvent(conversation, "from a")
            # Redis delivers in order: had c heard a's event, it would come first.
            d.publish(conversation, DeltaEvent(conversation, "from d"))
            assert await _next(heard_by_c) == DeltaEvent(conversation, "from d")
