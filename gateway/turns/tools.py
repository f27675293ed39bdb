"""The tools a turn offers the model: several families (recall, reminders), each
answering calls of its own names, and where a turn's calls are kept.

The model names what to do, never whose: the scope comes from the turn, so a call
cannot reach another conversation whatever its arguments say.
"""

from __future__ import annotations

import json
import uuid
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gateway.clock import Clock
from gateway.llm.base import Tool, ToolCall
from memory.recall import Scope, answer
from memory.storage.lookups import Lookups, NewLookup

# What a stored lookup keeps of a call's arguments, and a later call of the turn is shown
# again of them: the tools take a few words, but a model can write anything there.
MAX_ARGUMENT_CHARS = 2000


class ToolArguments(BaseModel):
    # A model may add keys of its own; they are ignored, never an error.
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class BadArguments(ValueError):
    """A call's arguments are not what its tool takes; the message says why."""


Shape = TypeVar("Shape", bound=ToolArguments)


def read_arguments(shape: type[Shape], call: ToolCall) -> Shape:
    """A call's arguments as `shape`; `BadArguments` (in words the model can act on)."""
    try:
        return shape.model_validate(json.loads(call.arguments or "{}"))
    except (ValueError, ValidationError) as exc:
        raise BadArguments(
            f"Error: the arguments of {call.name} are not valid: {_why(exc)}"
        ) from None


class ToolFamily(Protocol):
    """Tools that belong together, with what the system prompt says of them."""

    tools: tuple[Tool, ...]
    guide: str

    async def run(self, scope: Scope, call: ToolCall) -> str:
        """What the model reads back of one call of one of `tools`."""
        ...


class Toolbox:
    """Runs a turn's tool calls, each within `scope`, and keeps them."""

    def __init__(self, families: tuple[ToolFamily, ...], lookups: Lookups, clock: Clock) -> None:
        self._families = {tool.name: family for family in families for tool in family.tools}
        self.tools = tuple(tool for family in families for tool in family.tools)
        self.guide = "\n\n".join(family.guide for family in families if family.guide)
        self._lookups = lookups
        self._clock = clock

    async def call(self, scope: Scope, call: ToolCall) -> NewLookup:
        """Run one call; what the model reads back (an error it can act on, if the call
        was wrong) and what is kept of it."""
        family = self._families.get(call.name)
        if family is None:
            known = ", ".join(self._families)
            result = answer(f"Error: there is no tool {call.name!r}; the tools are {known}.")
        else:
            try:
                result = await family.run(scope, call)
            except BadArguments as exc:
                result = str(exc)
        return NewLookup(call.name, call.arguments[:MAX_ARGUMENT_CHARS], result)

    async def record(
        self, conversation_id: uuid.UUID, message_id: int, lookups: list[NewLookup]
    ) -> None:
        """Keep a turn's calls with the last message it answered."""
        await self._lookups.record(conversation_id, message_id, lookups, now=self._clock.now())


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False)
        )
    return "they are not a JSON object"
