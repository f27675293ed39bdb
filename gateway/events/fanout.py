"""Hub events between replicas, over Redis pub/sub.

Each conversation has a channel of its own, and a replica subscribes to the channels
of the conversations it has subscribers for (sockets, reply waiters, the dashboard's
live page), so it decodes no token of the others' conversations; it still skips its
own events. Redis pub/sub ignores the database number, so the channels name it:
instances sharing one Redis server on different databases do not hear each other. A
stored message travels as its seq only (the database is the truth: the socket reads it
from there); a streamed delta travels whole.

Subscribing takes a round trip: what another replica publishes between a local
subscriber's arrival and Redis confirming the SUBSCRIBE is lost, so when Redis confirms
a conversation's channel its local subscribers catch up from the database (`Overflow`).
The same covers a lost link: on the new one every conversation is subscribed again, and
each catches up once Redis has it. While the link is down nothing waits for it: events
are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.connection import parse_url
from redis.exceptions import RedisError

from gateway.backoff import full_jitter
from gateway.events.hub import (
    DeliveryChanged,
    DeltaEvent,
    Ended,
    Event,
    Hub,
    MessageEvent,
    Stored,
    Typing,
)

log = structlog.get_logger(__name__)

# Events waiting to be published; beyond this a dead Redis costs memory no more.
OUTBOX_LIMIT = 10_000
# Events sent in one round trip, at most: those that queued while the last were sent.
PUBLISH_BATCH = 500
RECONNECT_MAX_SECONDS = 10.0
REDIS_DOWN = (RedisError, OSError, asyncio.TimeoutError)


def channel_prefix(redis_url: str) -> str:
    """The events channels of the Redis database `redis_url` names start so."""
    db = parse_url(redis_url).get("db", 0)
    return f"parley:{db}:events"


class RedisFanout:
    """The hub's events to and from the other replicas; the hub's `Interest` too."""

    def __init__(self, hub: Hub, redis_url: str) -> None:
        self._hub = hub
        self._url = redis_url
        self._prefix = channel_prefix(redis_url)
        self._origin = uuid.uuid4().hex
        # Subscribed for as long as the link lasts, so that listening never runs dry when
        # no conversation is wanted; nobody publishes on it.
        self._own_channel = f"{self._prefix}:replica:{self._origin}"
        self._outbox: asyncio.Queue[tuple[str, str]] = asyncio.Queue(maxsize=OUTBOX_LIMIT)
        self._wanted: set[uuid.UUID] = set()
        self._wanted_changed = asyncio.Event()
        self._heard: set[uuid.UUID] = set()  # subscribed, as Redis confirmed on this link
        self._failures = 0
        self._tasks: list[asyncio.Task[None]] = []
        self.listening = asyncio.Event()  # set while linked (for tests and readiness)
        self.decoded = 0  # events of the other replicas read here (for tests and benches)

    def channel(self, conversation_id: uuid.UUID) -> str:
        return f"{self._prefix}:{conversation_id}"

    def hears(self, conversation_id: uuid.UUID) -> bool:
        """Whether Redis has confirmed this replica's subscription to the conversation."""
        return conversation_id in self._heard

    async def start(self) -> None:
        self._hub.forward_to(self._forward)
        self._hub.watch(self)
        self._tasks = [
            asyncio.create_task(self._publish_forever(), name="fanout-publish"),
            asyncio.create_task(self._listen_forever(), name="fanout-listen"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def wanted(self, conversation_id: uuid.UUID) -> None:
        # The hub calls from its synchronous `subscribe`: the listener does the talking.
        self._wanted.add(conversation_id)
        self._wanted_changed.set()

    def unwanted(self, conversation_id: uuid.UUID) -> None:
        self._wanted.discard(conversation_id)
        self._wanted_changed.set()

    def _forward(self, conversation_id: uuid.UUID, event: Event) -> None:
        payload = _encode(conversation_id, event, self._origin)
        if payload is None:
            return
        # Full: Redis has been gone for long; the other replicas' sockets catch up.
        with contextlib.suppress(asyncio.QueueFull):
            self._outbox.put_nowait((self.channel(conversation_id), payload))

    async def _publish_forever(self) -> None:
        # Best effort, in order: an event that cannot go now is dropped (the database
        # has what matters, and listeners catch up from it when the link is back).
        # What queued while the last events were on their way goes in one pipeline:
        # a PUBLISH on its own costs a round trip and about ten times the CPU, and
        # streaming replies queue hundreds of deltas a second.
        down = False
        async with _client(self._url) as redis:
            while True:
                batch = [await self._outbox.get()]
                while len(batch) < PUBLISH_BATCH and not self._outbox.empty():
                    batch.append(self._outbox.get_nowait())
                try:
                    await _publish(redis, batch)
                    down = False
                except REDIS_DOWN as exc:
                    if not down:
                        log.warning("events for the other replicas are dropped", error=str(exc))
                    down = True

    async def _listen_forever(self) -> None:
        while True:
            try:
                async with _client(self._url) as redis, redis.pubsub() as pubsub:
                    await self._listen(pubsub)
            except REDIS_DOWN as exc:
                self._failures += 1
                log.warning("lost the event link to the other replicas", error=str(exc))
                await asyncio.sleep(full_jitter(self._failures, 0.1, RECONNECT_MAX_SECONDS))

    async def _listen(self, pubsub: PubSub) -> None:
        """Read the link while another task steers its subscriptions (Redis takes
        SUBSCRIBE and UNSUBSCRIBE on a connection that is listening)."""
        await pubsub.subscribe(self._own_channel)
        self._wanted_changed.set()  # a new link: subscribe to every wanted conversation
        tasks = (
            asyncio.create_task(self._read(pubsub), name="fanout-read"),
            asyncio.create_task(self._steer(pubsub), name="fanout-steer"),
        )
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # the link's error, if that is why it ended
        finally:
            self.listening.clear()
            self._heard.clear()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, *REDIS_DOWN):
                    await task

    async def _steer(self, pubsub: PubSub) -> None:
        """Keep the link's subscriptions to the wanted conversations' channels, asking
        Redis for the difference only (a conversation left and wanted again meanwhile
        costs nothing, and its subscription never lapsed)."""
        asked: set[uuid.UUID] = set()
        while True:
            await self._wanted_changed.wait()
            self._wanted_changed.clear()
            wanted = set(self._wanted)
            if joined := wanted - asked:
                await pubsub.subscribe(*(self.channel(c) for c in joined))
            if left := asked - wanted:
                await pubsub.unsubscribe(*(self.channel(c) for c in left))
            asked = wanted

    async def _read(self, pubsub: PubSub) -> None:
        async for message in pubsub.listen():
            kind = message.get("type")
            if kind == "message":
                self._receive(message["data"])
            elif kind in ("subscribe", "unsubscribe"):
                self._confirmed(kind, message["channel"].decode())

    def _confirmed(self, kind: str, channel: str) -> None:
        if channel == self._own_channel:
            if kind == "subscribe":
                self._failures = 0
                self.listening.set()
            return
        conversation_id = uuid.UUID(channel.removeprefix(f"{self._prefix}:"))
        if kind == "unsubscribe":
            self._heard.discard(conversation_id)
            return
        self._heard.add(conversation_id)
        # From here on Redis brings every event of it; what came before is in the database.
        self._hub.overflow(conversation_id)

    def _receive(self, data: bytes) -> None:
        self.decoded += 1
        try:
            origin, conversation_id, event = decode(data)
        except (ValueError, KeyError, TypeError):
            log.warning("ignored an event that is not Parley's")
            return
        if origin != self._origin:
            self._hub.deliver(conversation_id, event)


def decode(data: bytes) -> tuple[str, uuid.UUID, Event]:
    """The replica an event came from, its conversation and the event; raises ValueError,
    KeyError or TypeError for what no replica sent."""
    item: dict[str, Any] = json.loads(data)
    conversation_id = uuid.UUID(item["conversation"])
    event: Event
    if "delta" in item:
        event = DeltaEvent(conversation_id, str(item["delta"]))
    elif item.get("typing") is True:
        event = Typing(conversation_id)
    elif "ended" in item:
        event = Ended(conversation_id, str(item["ended"]))
    elif "delivery" in item:
        event = DeliveryChanged(conversation_id, int(item["delivery"]))
    else:
        event = Stored(conversation_id, int(item["seq"]), _optional_int(item.get("answers")))
    return str(item["origin"]), conversation_id, event


def _encode(conversation_id: uuid.UUID, event: Event, origin: str) -> str | None:
    item: dict[str, Any] = {"origin": origin, "conversation": str(conversation_id)}
    if isinstance(event, DeltaEvent):
        item["delta"] = event.text
    elif isinstance(event, Typing):
        item["typing"] = True
    elif isinstance(event, Ended):
        item["ended"] = event.notice
    elif isinstance(event, DeliveryChanged):
        item["delivery"] = event.seq
    elif isinstance(event, MessageEvent):
        item["seq"] = event.message.seq
        item["answers"] = event.message.reply_to_seq
    else:
        return None  # local bookkeeping (overflow) stays local
    return json.dumps(item)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@contextlib.asynccontextmanager
async def _client(url: str) -> AsyncIterator[Redis]:
    redis = Redis.from_url(url, socket_connect_timeout=3)
    try:
        yield redis
    finally:
        await redis.aclose()


async def _publish(redis: Redis, batch: list[tuple[str, str]]) -> None:
    if len(batch) == 1:
        await redis.publish(*batch[0])
        return
    async with redis.pipeline(transaction=False) as pipe:
        for channel, payload in batch:
            pipe.publish(channel, payload)
        await pipe.execute()
