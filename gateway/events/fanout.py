"""Hub events between replicas, over Redis pub/sub.

Every replica publishes its events on one channel and listens to it, skipping its
own. Redis pub/sub ignores the database number, so the channel names it: instances
sharing one Redis server on different databases do not hear each other. A stored message travels as its seq only (the database is the truth: the socket
reads it from there); a streamed delta travels whole. While the link to Redis is
down nothing waits for it: events are dropped, and when it is back every local
subscriber catches up from the database.
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
RECONNECT_MAX_SECONDS = 10.0
REDIS_DOWN = (RedisError, OSError, asyncio.TimeoutError)


def channel_for(redis_url: str) -> str:
    """The events channel of the Redis database `redis_url` names."""
    db = parse_url(redis_url).get("db", 0)
    return f"parley:{db}:events"


class RedisFanout:
    def __init__(self, hub: Hub, redis_url: str) -> None:
        self._hub = hub
        self._url = redis_url
        self._channel = channel_for(redis_url)
        self._origin = uuid.uuid4().hex
        self._outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=OUTBOX_LIMIT)
        self._tasks: list[asyncio.Task[None]] = []
        self.listening = asyncio.Event()  # set while subscribed (for tests and readiness)

    async def start(self) -> None:
        self._hub.forward_to(self._forward)
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

    def _forward(self, conversation_id: uuid.UUID, event: Event) -> None:
        payload = _encode(conversation_id, event, self._origin)
        if payload is None:
            return
        # Full: Redis has been gone for long; the other replicas' sockets catch up.
        with contextlib.suppress(asyncio.QueueFull):
            self._outbox.put_nowait(payload)

    async def _publish_forever(self) -> None:
        # Best effort, in order: an event that cannot go now is dropped (the database
        # has what matters, and listeners catch up from it when the link is back).
        down = False
        async with _client(self._url) as redis:
            while True:
                payload = await self._outbox.get()
                try:
                    await redis.publish(self._channel, payload)
                    down = False
                except REDIS_DOWN as exc:
                    if not down:
                        log.warning("events for the other replicas are dropped", error=str(exc))
                    down = True

    async def _listen_forever(self) -> None:
        failures = 0
        while True:
            try:
                async with _client(self._url) as redis, redis.pubsub() as pubsub:
                    await pubsub.subscribe(self._channel)
                    self.listening.set()
                    if failures:
                        self._hub.overflow_all()  # what was missed is in the database
                    failures = 0
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._receive(message["data"])
            except REDIS_DOWN as exc:
                self.listening.clear()
                failures += 1
                log.warning("lost the event link to the other replicas", error=str(exc))
                await asyncio.sleep(full_jitter(failures, 0.1, RECONNECT_MAX_SECONDS))

    def _receive(self, data: bytes) -> None:
        try:
            item: dict[str, Any] = json.loads(data)
            if item["origin"] == self._origin:
                return
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
                event = Stored(
                    conversation_id, int(item["seq"]), _optional_int(item.get("answers"))
                )
        except (ValueError, KeyError, TypeError):
            log.warning("ignored an event that is not Parley's")
            return
        self._hub.deliver(conversation_id, event)


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
