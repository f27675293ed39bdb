"""The main model and its fallbacks (PARLEY_LLM_FALLBACKS, DESIGN §12), tried in order
when one fails after its own retries.

A turn streams its reply to people, so it walks the chain itself
(`gateway.turns.answering`): a model that fails part-way has what it showed withdrawn
before the next one starts. For work that shows nothing while it is written
(summaries, extraction, tidy) the chain is one provider: each model's reply is read
whole before any of it is passed on, so a reply never mixes two models.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

import structlog

from gateway.errors import LLMError
from gateway.llm.base import LLMProvider, Piece, Prompt

log = structlog.get_logger(__name__)


class ModelChain:
    def __init__(self, models: Sequence[LLMProvider]) -> None:
        if not models:
            raise ValueError("a chain needs a model")
        self.models = tuple(models)
        main = self.models[0]
        self.name = main.name
        self.model = main.model
        # A turn offers tools only if every model it may end on can take them.
        self.offers_tools = all(model.offers_tools for model in self.models)
        # Images are shown if the main model sees; a fallback that does not is sent
        # the words about them only (its provider leaves the images out).
        self.sees_images = main.sees_images

    def image_tokens(self, width: int, height: int) -> int:
        # Room for the dearest of the models that would be shown them.
        return max(m.image_tokens(width, height) for m in self.models if m.sees_images)

    async def stream(self, prompt: Prompt) -> AsyncIterator[Piece]:
        failure: LLMError | None = None
        for index, model in enumerate(self.models):
            try:
                pieces = [piece async for piece in model.stream(asked_of(prompt, index))]
            except LLMError as exc:
                failure = exc
                log.warning(
                    "a model failed; the next one is asked", model=model.model, error=str(exc)
                )
                continue
            for piece in pieces:
                yield piece
            return
        assert failure is not None
        raise failure

    async def aclose(self) -> None:
        for model in self.models:
            await model.aclose()


def models_of(provider: LLMProvider) -> tuple[LLMProvider, ...]:
    """The models a turn may ask, in order."""
    return provider.models if isinstance(provider, ModelChain) else (provider,)


def asked_of(prompt: Prompt, index: int) -> Prompt:
    """The prompt as the `index`th model of a chain gets it: a model the prompt names
    (the summary model) is the main provider's; a fallback asks its own."""
    return prompt if index == 0 or prompt.model is None else replace(prompt, model=None)
