"""A model provider of either kind pointed at the fake model server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Literal

from gateway.llm.anthropic import AnthropicProvider
from gateway.llm.base import LLMProvider, UsageSink
from gateway.llm.openai import OpenAIProvider
from tests.fakes.llm_server import FakeLLM

Kind = Literal["openai", "anthropic"]
KEY = "sk-test-0123456789abcdef"


@contextlib.asynccontextmanager
async def provider(
    kind: Kind,
    fake: FakeLLM,
    *,
    base_url: str | None = None,
    api_key: str | None = KEY,
    read_timeout: float = 5.0,
    max_retries: int = 2,
    retry_base_seconds: float = 0.01,
    on_usage: UsageSink | None = None,
) -> AsyncIterator[LLMProvider]:
    cls = OpenAIProvider if kind == "openai" else AnthropicProvider
    default_base = fake.openai_base if kind == "openai" else fake.base_url
    llm = cls(
        base_url=base_url or default_base,
        api_key=api_key,
        model="fake-model",
        timeout=read_timeout,
        max_retries=max_retries,
        retry_base_seconds=retry_base_seconds,
        on_usage=on_usage,
    )
    try:
        yield llm
    finally:
        await llm.aclose()
