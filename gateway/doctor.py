"""`parley doctor`: whether this deployment is set up right, one line per check.

The settings were read already (a bad one stops the command before this, naming it).
Then the database (reachable, schema current), Redis when configured, the model (one
tiny request) and each configured channel against its own platform's API (the
connector knows how: `Diagnoses`). A check that fails says what to do. Nothing here
prints a secret: each line is scrubbed of every secret the settings hold, as logs are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.engine import make_url

from gateway.channels.port import Diagnoses, Finding
from gateway.channels.registry import enabled_connectors
from gateway.errors import LLMError
from gateway.llm import build_provider
from gateway.llm.base import Prompt, complete
from gateway.logs import secrets_of
from gateway.settings import LLMProviderName, Settings
from memory.chat_turn import ChatTurn
from memory.storage.engine import create_engine
from memory.storage.migrate import current_revision, head_revision

# Each check gets this long before it counts as not answering.
CHECK_SECONDS = 20.0


async def examine(settings: Settings) -> list[Finding]:
    """Every check, in order; a check that crashes is a failed line, not a crash."""
    found = [Finding("settings", True, "read (each PARLEY_ variable checked)")]
    found.append(await _guarded("database", _database(settings)))
    if settings.redis_url:
        found.append(await _guarded("Redis", _redis(settings.redis_url)))
    found.append(await _guarded("model", _model(settings)))
    for connector in enabled_connectors(settings):
        if isinstance(connector, Diagnoses):
            try:
                found.extend(await asyncio.wait_for(connector.diagnose(), CHECK_SECONDS))
            except Exception as exc:
                found.append(_failed(connector.channel, exc))
    secrets = [s for s in secrets_of(settings) if len(s) >= 4]
    return [replace(f, detail=_scrubbed(f.detail, secrets)) for f in found]


async def _guarded(name: str, check: Coroutine[Any, Any, Finding]) -> Finding:
    try:
        return await asyncio.wait_for(check, CHECK_SECONDS)
    except Exception as exc:
        return _failed(name, exc)


def _failed(name: str, exc: Exception) -> Finding:
    if isinstance(exc, TimeoutError):
        return Finding(name, False, f"no answer within {CHECK_SECONDS:.0f} s")
    return Finding(name, False, f"{type(exc).__name__}: {exc}")


async def _database(settings: Settings) -> Finding:
    url = settings.resolved_database_url
    if settings.is_sqlite:
        path = make_url(url).database
        if path and not await asyncio.to_thread(Path(path).exists):
            return Finding("database", True, f"SQLite at {path}: `parley serve` makes it")
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        current, head = await current_revision(engine), head_revision()
    except Exception as exc:
        return Finding(
            "database",
            False,
            f"cannot connect ({type(exc).__name__}): check PARLEY_DATABASE_URL and that the "
            "server runs",
        )
    finally:
        await engine.dispose()
    kind = "SQLite" if settings.is_sqlite else "PostgreSQL"
    if current == head:
        return Finding("database", True, f"{kind}, schema {head}")
    if settings.is_sqlite:
        return Finding(
            "database", True, f"{kind}, schema {current}: `parley serve` brings it to {head}"
        )
    return Finding(
        "database", False, f"{kind}, schema {current or 'empty'}, not {head}: run `parley migrate`"
    )


async def _redis(url: str) -> Finding:
    redis = Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    where = f"{redis.connection_pool.connection_kwargs.get('host')}:" + str(
        redis.connection_pool.connection_kwargs.get("port")
    )
    try:
        await redis.ping()
    except Exception as exc:
        return Finding(
            "Redis",
            False,
            f"{where} did not answer ({type(exc).__name__}): check PARLEY_REDIS_URL and "
            "that Redis runs",
        )
    finally:
        await redis.aclose()
    return Finding("Redis", True, where)


async def _model(settings: Settings) -> Finding:
    if settings.llm_provider is LLMProviderName.OFFLINE:
        half_set = [
            f"PARLEY_{name.upper()}"
            for name in ("llm_base_url", "llm_model", "llm_api_key")
            if name in settings.model_fields_set
        ]
        if half_set:
            # Easy to miss: a model set up without its provider runs the stand-in.
            return Finding(
                "model",
                False,
                f"{' and '.join(half_set)} set, but PARLEY_LLM_PROVIDER is not, so the offline "
                "stand-in answers: set PARLEY_LLM_PROVIDER=openai or anthropic",
            )
        return Finding(
            "model",
            True,
            "none configured: the offline stand-in answers (set PARLEY_LLM_PROVIDER)",
        )
    # One try, no retries: the question is whether it answers at all.
    provider = build_provider(settings.model_copy(update={"llm_max_retries": 0}))
    asked = Prompt(system="Answer with one word.", turns=(ChatTurn("user", "ping"),), max_tokens=8)
    where = f"{settings.llm_model} at {settings.resolved_llm_base_url}"
    try:
        await complete(provider, asked)
    except LLMError as exc:
        return Finding(
            "model",
            False,
            f"{where}: {exc} (check PARLEY_LLM_BASE_URL, PARLEY_LLM_MODEL and PARLEY_LLM_API_KEY)",
        )
    finally:
        await provider.aclose()
    return Finding("model", True, f"{where} answered")


def _scrubbed(detail: str, secrets: list[str]) -> str:
    for secret in secrets:
        detail = detail.replace(secret, "***")
    return detail
