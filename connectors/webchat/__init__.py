"""Web chat: the HTTP and WebSocket API any client can use, and a minimal page."""

from connectors.webchat.connector import WebchatConnector, create

__all__ = ["WebchatConnector", "create"]
