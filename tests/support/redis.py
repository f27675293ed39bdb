"""A real Redis for worker tests: a database of its own, emptied before each test.

Under pytest-xdist each worker process has a database of its own, counting down from
$PARLEY_TEST_REDIS_URL's (13, 12, 11, … for gw0, gw1, gw2, …), so one worker's flush
never empties another's queue.
"""

from __future__ import annotations

import os

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tests.support.databases import require_service

# The database of the first worker (or of a run without workers).
BASE_URL = os.environ.get("PARLEY_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


def _worker_url(base: str) -> str:
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    server, db = base.rsplit("/", 1)
    return f"{server}/{(int(db) - worker) % 16}"


REDIS_URL = _worker_url(BASE_URL)


async def fresh_redis() -> str:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await client.flushdb()
    except (RedisError, OSError) as exc:
        require_service("Redis", exc)
    finally:
        await client.aclose()
    return REDIS_URL


async def flush(url: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()
