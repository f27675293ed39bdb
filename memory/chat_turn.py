"""What a model is shown of the conversation: turns of user and assistant text, and the
images a model that sees is shown with them.

Apart from the rest of `memory` so a model provider can use it without loading storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image shown to the model as itself, after its turn's text."""

    mime: str  # image/jpeg or image/png: what the gateway re-encoded it as
    data: bytes
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class ChatTurn:
    role: Literal["user", "assistant"]
    content: str
    images: tuple[ImagePart, ...] = ()
