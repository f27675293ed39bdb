"""Language-model providers behind one streaming interface.

`build_provider(settings)` picks the one the settings name; everything else in the
gateway sees only `LLMProvider`.
"""

from __future__ import annotations

from typing import TypedDict, assert_never

from gateway.llm.anthropic import AnthropicProvider
from gateway.llm.base import (
    LLMProvider,
    Piece,
    Prompt,
    Tool,
    ToolCall,
    ToolStep,
    Usage,
    UsageSink,
    complete,
    complete_counted,
)
from gateway.llm.fallback import ModelChain
from gateway.llm.offline import OfflineProvider
from gateway.llm.openai import OpenAIProvider
from gateway.llm.transcribe import Transcriber
from gateway.settings import LLMProviderName, Settings
from memory.chat_turn import ChatTurn

__all__ = [
    "ChatTurn",
    "LLMProvider",
    "Piece",
    "Prompt",
    "Tool",
    "ToolCall",
    "ToolStep",
    "Usage",
    "build_provider",
    "build_transcriber",
    "complete",
    "complete_counted",
]


class _HTTPOptions(TypedDict):
    base_url: str
    api_key: str | None
    model: str
    timeout: float
    max_retries: int
    retry_base_seconds: float
    sees_images: bool


def build_provider(settings: Settings, on_usage: UsageSink | None = None) -> LLMProvider:
    """The provider the settings name, with its fallbacks after it (a chain) if any;
    `on_usage` hears the tokens of each call."""
    main = _main_provider(settings, on_usage)
    if not settings.llm_fallbacks:
        return main
    options = _http_options(settings)
    fallbacks: list[LLMProvider] = []
    for fallback in settings.llm_fallbacks:
        own: _HTTPOptions = options | {
            "base_url": fallback.resolved_base_url,
            "model": fallback.model,
            "api_key": fallback.api_key.get_secret_value() if fallback.api_key else None,
        }
        kind = (
            AnthropicProvider if fallback.provider is LLMProviderName.ANTHROPIC else OpenAIProvider
        )
        fallbacks.append(kind(**own, on_usage=on_usage))
    return ModelChain([main, *fallbacks])


def _main_provider(settings: Settings, on_usage: UsageSink | None) -> LLMProvider:
    match settings.llm_provider:
        case LLMProviderName.OPENAI:
            return OpenAIProvider(**_http_options(settings), on_usage=on_usage)
        case LLMProviderName.ANTHROPIC:
            return AnthropicProvider(**_http_options(settings), on_usage=on_usage)
        case LLMProviderName.OFFLINE:
            return OfflineProvider()
        case _:
            assert_never(settings.llm_provider)


def _http_options(settings: Settings) -> _HTTPOptions:
    key = settings.llm_api_key
    return {
        "base_url": settings.resolved_llm_base_url,
        "api_key": key.get_secret_value() if key else None,
        "model": settings.llm_model,
        "timeout": settings.llm_timeout_seconds,
        "max_retries": settings.llm_max_retries,
        "retry_base_seconds": settings.llm_retry_base_seconds,
        "sees_images": settings.sees_images,
    }


def build_transcriber(settings: Settings) -> Transcriber | None:
    """The speech-to-text the settings name, if any (DESIGN §11)."""
    where = settings.transcriber
    if where is None:
        return None
    base_url, key = where
    return Transcriber(
        base_url=base_url,
        api_key=key.get_secret_value() if key else None,
        model=settings.transcribe_model,
        timeout=settings.llm_timeout_seconds,
        max_retries=settings.llm_max_retries,
        retry_base_seconds=settings.llm_retry_base_seconds,
    )
