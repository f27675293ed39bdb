"""WhatsApp Cloud API: a signed webhook in, the Graph API out (aiohttp)."""

from connectors.whatsapp.connector import WhatsAppConnector, create

__all__ = ["WhatsAppConnector", "create"]
