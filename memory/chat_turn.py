"""What a model is shown of the conversation: turns of user and assistant text.

Apart from the rest of `memory` so a model provider can use it without loading storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ChatTurn:
    role: Literal["user", "assistant"]
    content: str
