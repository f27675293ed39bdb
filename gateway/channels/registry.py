"""Which connectors run: channel name -> import path, and the connector's settings.

A connector whose credentials are unset is never imported, so its platform SDK is
never loaded. Each connector is handed only its own settings (`connector_settings`),
cut here from the whole.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from gateway.channels.connector_settings import (
    discord_settings,
    telegram_settings,
    webchat_settings,
    whatsapp_settings,
)
from gateway.channels.port import Connector
from gateway.settings import Settings

# Any: each factory takes its own channel's settings, the one its slice function makes.
ConnectorFactory = Callable[[Any], Connector]

# channel -> (import path "module:factory", its settings; None: not configured)
REGISTRY: dict[str, tuple[str, Callable[[Settings], object | None]]] = {
    "webchat": ("connectors.webchat:create", webchat_settings),
    "telegram": ("connectors.telegram:create", telegram_settings),
    "discord": ("connectors.discord:create", discord_settings),
    "whatsapp": ("connectors.whatsapp:create", whatsapp_settings),
}


def enabled_connectors(settings: Settings) -> list[Connector]:
    connectors = []
    for path, own_settings in REGISTRY.values():
        own = own_settings(settings)
        if own is not None:
            module_name, factory_name = path.split(":")
            factory: ConnectorFactory = getattr(importlib.import_module(module_name), factory_name)
            connectors.append(factory(own))
    return connectors
