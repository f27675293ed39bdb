"""Discord, through discord.py: a gateway connection (on one replica) and REST sends."""

from connectors.discord.connector import DiscordConnector, create

__all__ = ["DiscordConnector", "create"]
