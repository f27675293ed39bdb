"""Chat commands (`/status`, `/link CODE`, …): answered by the gateway, not the model.

A command runs in its conversation's turn order, so its answer lands where the person
expects it; neither the command nor its answer is shown to the model later.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from memory.storage.messages import StoredMessage

__all__ = ["Commands", "Handler", "Invocation", "NotACommand"]
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


class NotACommand(LookupError):
    """Asked to answer a message that invokes no command: whoever asked skipped
    `recognises`."""


class Commands:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._usage: dict[str, str] = {}
        self.register("help", self._help, "/help — what you can ask the gateway itself")

    def register(self, name: str, handler: Handler, usage: str) -> None:
        """`usage`: the line `/help` shows for the command."""
        self._handlers[name.lower()] = handler
        self._usage[name.lower()] = usage

    async def _help(self, _: Invocation) -> str:
        lines = [self._usage[name] for name in sorted(self._usage) if name != "help"]
        return "Commands (answered by the gateway, not the assistant):\n" + "\n".join(
            [*lines, self._usage["help"]]
        )

    def parse(self, message: StoredMessage) -> Invocation | None:
        """The command a typed message invokes, if it is one we know."""
        if message.source is not None:
            return None
        match = _COMMAND.match(message.text.strip())
        if match is None or match.group(1).lower() not in self._handlers:
            return None
        return Invocation(match.group(1).lower(), (match.group(2) or "").strip(), message)

    def recognises(self, message: StoredMessage) -> bool:
        return self.parse(message) is not None

    async def answer(self, message: StoredMessage) -> str:
        invocation = self.parse(message)
        if invocation is None:
            raise NotACommand
        return await self._handlers[invocation.name](invocation)
