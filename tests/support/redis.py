"""A real Redis for worker tests: a database of its own, emptied before each test."""

from __future__ import annotations

import os

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tests.support.databases import require_service

REDIS_URL = os.environ.get("PARLEY_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


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
