"""The fan-out between replicas, over a real Redis: who hears whose events, and who
decodes what."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url

from gateway.events.fanout import RedisFanout, channel_prefix
from gateway.events.hub import DeltaEvent, Event, Hub, Overflow
from tests.support.gated_link import GatedLink
from tests.support.polling import eventually
from tests.support.redis import fresh_redis


@dataclass(frozen=True)
class Replica:
    hub: Hub
    fanout: RedisFanout


@contextlib.asynccontextmanager
async def _replica(redis_url: str) -> AsyncIterator[Replica]:
    hub = Hub()
    fanout = RedisFanout(hub, redis_url)
    await fanout.start()
    try:
        await asyncio.wait_for(fanout.listening.wait(), 10)
        yield Replica(hub, fanout)
    finally:
        await fanout.close()


@contextlib.asynccontextmanager
async def _redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def _next(queue: asyncio.Queue[Event]) -> Event:
    return await asyncio.wait_for(queue.get(), 10)


async def _subscribers(redis: aioredis.Redis, channel: str) -> int:
    [(_, count)] = await redis.pubsub_numsub(channel)
    return int(count)


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
        with (
            b.hub.subscribe(conversation) as heard_by_b,
            c.hub.subscribe(conversation) as heard_by_c,
        ):
            # Each catches up once Redis has its subscription: from then on it hears all.
            assert [await _next(heard_by_b), await _next(heard_by_c)] == [Overflow()] * 2
            a.hub.publish(conversation, DeltaEvent(conversation, "from a"))
            assert await _next(heard_by_b) == DeltaEvent(conversation, "from a")
            # Redis delivers in order: had c heard a's event, it would come first.
            d.hub.publish(conversation, DeltaEvent(conversation, "from d"))
            assert await _next(heard_by_c) == DeltaEvent(conversation, "from d")
    assert a.fanout.decoded == 0  # a has no subscriber: it read nothing, not even its own


async def test_a_replica_decodes_only_the_conversations_it_has_subscribers_for() -> None:
    url = await fresh_redis()
    watched, unwatched = uuid.uuid4(), uuid.uuid4()
    async with _replica(url) as a, _replica(url) as b, _redis(url) as redis:
        with b.hub.subscribe(watched) as heard_by_b:
            assert await _next(heard_by_b) == Overflow()
            for n in range(50):
                a.hub.publish(unwatched, DeltaEvent(unwatched, f"token {n}"))
            a.hub.publish(watched, DeltaEvent(watched, "for b"))
            # a publishes in order: had b read any of the 50, it would have read it first.
            assert await _next(heard_by_b) == DeltaEvent(watched, "for b")
            unwatched_subscribers = await _subscribers(redis, b.fanout.channel(unwatched))
            watched_subscribers = await _subscribers(redis, b.fanout.channel(watched))

    assert b.fanout.decoded == 1
    assert (unwatched_subscribers, watched_subscribers) == (0, 1)


async def test_a_burst_published_at_once_arrives_whole_and_in_order() -> None:
    # A streamed reply queues its deltas faster than Redis answers: they go in batches.
    url = await fresh_redis()
    one, other = uuid.uuid4(), uuid.uuid4()
    burst = [DeltaEvent(c, f"token {n}") for n in range(600) for c in (one, other)]
    async with _replica(url) as a, _replica(url) as b:
        with b.hub.subscribe(one) as first, b.hub.subscribe(other) as second:
            assert [await _next(first), await _next(second)] == [Overflow()] * 2
            for event in burst:
                a.hub.publish(event.conversation_id, event)
            heard = [[await _next(queue) for _ in range(600)] for queue in (first, second)]

    assert heard == [[e for e in burst if e.conversation_id == c] for c in (one, other)]


async def test_a_conversations_channel_is_left_when_its_last_subscriber_here_leaves() -> None:
    url = await fresh_redis()
    first, second = uuid.uuid4(), uuid.uuid4()
    async with _replica(url) as a, _redis(url) as redis:

        async def channels() -> tuple[set[bytes], bool, bool]:
            """The conversations' channels Redis has subscribers for (not a replica's
            own), and which of the two conversations a knows it hears."""
            found = await redis.pubsub_channels(channel_prefix(url) + ":*")
            ours = {channel for channel in found if b":replica:" not in channel}
            return ours, a.fanout.hears(first), a.fanout.hears(second)

        with a.hub.subscribe(first) as one:
            with a.hub.subscribe(first), a.hub.subscribe(second) as other:
                assert [await _next(one), await _next(other)] == [Overflow()] * 2
                both = await channels()
            # The first conversation keeps a subscriber here: its channel stays.
            after_one_left = await eventually(channels, until=lambda c: not c[2])
        after_all_left = await eventually(channels, until=lambda c: not c[1])

    assert both == ({a.fanout.channel(c).encode() for c in (first, second)}, True, True)
    assert after_one_left == ({a.fanout.channel(first).encode()}, True, False)
    assert after_all_left == (set(), False, False)


async def test_what_came_before_redis_had_the_subscription_is_caught_up_on() -> None:
    # Subscribing takes a round trip to Redis: an event another replica publishes in it
    # reaches nobody here. The relay holds b's SUBSCRIBE to make that happen every time.
    url = await fresh_redis()
    server = url.removeprefix("redis://").split("/", 1)[0]
    host, port = server.rsplit(":", 1)
    conversation = uuid.uuid4()
    async with (
        GatedLink(host, int(port)).serving() as link,
        _replica(f"redis://127.0.0.1:{link.port}/{parse_url(url)['db']}") as b,
        _redis(url) as redis,
    ):
        link.hold()
        channel = b.fanout.channel(conversation)
        with b.hub.subscribe(conversation) as heard_by_b:
            reached = await redis.publish(channel, _delta_from_another(conversation, "lost"))
            link.release()
            caught_up = await _next(heard_by_b)
            await redis.publish(channel, _delta_from_another(conversation, "heard"))
            after = await _next(heard_by_b)

    assert reached == 0  # b's SUBSCRIBE was still on its way: the event reached no one
    assert caught_up == Overflow()  # so b's subscriber reads the database
    assert after == DeltaEvent(conversation, "heard")


def _delta_from_another(conversation: uuid.UUID, text: str) -> str:
    """A delta as another replica's fan-out publishes it."""
    return json.dumps(
        {"origin": "another replica", "conversation": str(conversation), "delta": text}
    )
