"""Telegram, through python-telegram-bot: a webhook route of ours, or long polling."""

from connectors.telegram.connector import TelegramConnector, create

__all__ = ["TelegramConnector", "create"]
