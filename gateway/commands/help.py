"""`/help`: every command the gateway answers itself, read from the registry."""

from __future__ import annotations

from gateway.commands.registry import Command, Commands, Invocation

USAGE = "/help — what you can ask the gateway itself"


class HelpCommand:
    def __init__(self, registry: Commands) -> None:
        self._registry = registry

    def commands(self) -> list[Command]:
        return [Command("help", self.show, USAGE)]

    async def show(self, _: Invocation) -> str:
        # Read when asked, not when registered: it lists families registered after it.
        lines = [command.usage for command in self._registry.listed() if command.name != "help"]
        return "Commands (answered by the gateway, not the assistant):\n" + "\n".join(
            [*lines, USAGE]
        )
