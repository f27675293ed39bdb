"""What every child runs with, as `PARLEY_*` values.

Memory numbers are tiny so chunks are cut every few messages, consolidated and rolled up
within the run; leases and retries are short so that faults cost seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.settings import Settings
from gateway.wiring import memory_limits
from memory.archive.numbers import MemoryLimits
from tests.fakes.telegram_api import FakeTelegram, telegram_settings


def child_settings(
    *, data_dir: Path, database_url: str, redis_url: str, port: int, telegram: FakeTelegram
) -> dict[str, str]:
    """Settings by lower-case name, without the model's URL (each child has its own)."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "database_url": database_url,
        "redis_url": redis_url,
        "host": "127.0.0.1",
        "port": port,
        "admin_token": "fault-admin-token-0123456789",
        "secret_key": "fault-secret-key-0123456789abcdef",
        "telegram_policy": "open",
        "webchat_sessions_per_minute": 100_000,
        "webchat_messages_per_minute": 100_000,
        "reply_wait_seconds": 3,
        "llm_provider": "openai",
        "llm_api_key": "sk-fault-test",
        "llm_model": "fake-model",
        "llm_timeout_seconds": 20,
        "llm_retry_base_seconds": 0.05,
        # A 4096-token model: the limits below shrink to 1/32 (live 320, chunk 160).
        "llm_context_tokens": 4096,
        "llm_max_reply_tokens": 256,
        "live_window_tokens": 10_000,
        "chunk_tokens": 5_000,
        "chunk_min_tokens": 2_500,
        "consolidate_at": 3,
        "consolidate_count": 2,
        "rollup_keep": 1,
        "rollup_batch": 2,
        "sweep_interval_seconds": 1,
        "job_lease_seconds": 2,
        # A killed replica's conversations, chats and polling pass to another this soon.
        "turn_lease_seconds": 3,
        "archive_retry_base_seconds": 0.5,
        "archive_retry_max_seconds": 2,
        "delivery_retry_base_seconds": 0.1,
        "delivery_retry_max_seconds": 2,
    } | telegram_settings(telegram)
    return {key: str(value) for key, value in values.items()}


def limits_of(values: dict[str, str]) -> MemoryLimits:
    """The memory limits the children run with, scaled to the model's window as theirs are.
    Validated without the environment, as the children (whose `PARLEY_*` are only
    `values`) see it."""
    return memory_limits(Settings.model_validate(values))
