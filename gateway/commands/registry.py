"""The registry of chat commands: each name with what answers it and its line in `/help`.

A command runs in its conversation's turn order, so its answer lands where the person
expects it; neither the command nor its answer is shown to the model later. The turn
runner asks the registry through its `ChatCommands` port (`recognises`, `answer`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from memory.storage.messages import StoredMessage

__all__ = ["Command", "Commands", "Family", "Handler", "Invocation", "NotACommand"]
# `/name`, `/name@botname` (Telegram groups), then optional arguments.
_COMMAND = re.compile(r"^/([a-z][a-z0-9_]{0,31})(?:@\w+)?(?:\s+(.*))?$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Invocation:
    name: str
    args: str
    message: StoredMessage

    @property
    def conversation_id(self) -> uuid.UUID:
        return self.message.conversation_id


Handler = Callable[[Invocation], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Command:
    """One chat command. `name` is what follows the slash; `usage` is its `/help` line."""

    name: str
    handler: Handler
    usage: str


class Family(Protocol):
    """Commands that belong together (`/link` and `/unlink`), built with what they need."""

    def commands(self) -> Iterable[Command]: ...


class NotACommand(LookupError):
    """Asked to answer a message that invokes no command: whoever asked skipped
    `recognises`."""


class Commands:
    """Command name → `Command`: the one list of what the gateway answers itself."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def register(self, *families: Family) -> None:
        for command in (command for family in families for command in family.commands()):
            name = command.name.lower()
            # Two families claiming one name would leave one of them silently unreachable.
            if name in self._commands:
                raise ValueError(f"two commands are named /{name}")
            self._commands[name] = command

    def listed(self) -> list[Command]:
        """Every registered command, by name."""
        return [self._commands[name] for name in sorted(self._commands)]

    def parse(self, message: StoredMessage) -> Invocation | None:
        """The command a typed message invokes, if it is one we know."""
        if message.source is not None:
            return None
        match = _COMMAND.match(message.text.strip())
        if match is None or match.group(1).lower() not in self._commands:
            return None
        return Invocation(match.group(1).lower(), (match.group(2) or "").strip(), message)

    def recognises(self, message: StoredMessage) -> bool:
        return self.parse(message) is not None

    async def answer(self, message: StoredMessage) -> str:
        invocation = self.parse(message)
        if invocation is None:
            raise NotACommand
        return await self._commands[invocation.name].handler(invocation)
