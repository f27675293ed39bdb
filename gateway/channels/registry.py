"""Which connectors run: channel name -> import path, and whether it is configured.

A connector whose credentials are unset is never imported, so its platform SDK is
never loaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from gateway.channels.port import Connector
from gateway.settings import Settings

ConnectorFactory = Callable[[Settings], Connector]

# channel -> (import path "module:factory", is it configured?)
REGISTRY: dict[str, tuple[str, Callable[[Settings], bool]]] = {
    "webchat": ("connectors.webchat:create", lambda settings: True),
    "telegram": (
        "connectors.telegram:create",
        lambda settings: settings.telegram_token is not None,
    ),
    "discord": (
        "connectors.discord:create",
        lambda settings: settings.discord_token is not None,
    ),
    "whatsapp": (
        "connectors.whatsapp:create",
        lambda settings: settings.whatsapp_token is not None,
    ),
}


def enabled_connectors(settings: Settings) -> list[Connector]:
    connectors = []
    for path, configured in REGISTRY.values():
        if configured(settings):
            module_name, factory_name = path.split(":")
            factory: ConnectorFactory = getattr(importlib.import_module(module_name), factory_name)
            connectors.append(factory(settings))
    return connectors
