"""What a channel connector looks like to the core, and the registry that finds them.

The registry maps a channel name to an import path and a test of the settings; a
connector whose credentials are unset is never imported, so its platform SDK is
never loaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from gateway.messages import Outbound
from gateway.settings import Settings

if TYPE_CHECKING:
    from fastapi import APIRouter

    from gateway.channels.core import Core


class Connector(Protocol):
    channel: str

    @property
    def router(self) -> APIRouter | None:
        """HTTP routes the connector serves (webhooks, widget), if any."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, outbound: Outbound) -> str | None:
        """Deliver a reply (or one part of it); return the platform's id for it, if any.

        Raise `DeliveryError` if the platform refused it (`Undeliverable` if retrying
        cannot help)."""
        ...


ConnectorFactory = Callable[["Core", Settings], Connector]

# channel -> (import path "module:factory", is it configured?)
REGISTRY: dict[str, tuple[str, Callable[[Settings], bool]]] = {
    "webchat": ("connectors.webchat:create", lambda settings: True),
    "telegram": (
        "connectors.telegram:create",
        lambda settings: settings.telegram_token is not None,
    ),
    "whatsapp": (
        "connectors.whatsapp:create",
        lambda settings: settings.whatsapp_token is not None,
    ),
}


def enabled_connectors(core: Core, settings: Settings) -> list[Connector]:
    connectors = []
    for path, configured in REGISTRY.values():
        if configured(settings):
            module_name, factory_name = path.split(":")
            factory: ConnectorFactory = getattr(importlib.import_module(module_name), factory_name)
            connectors.append(factory(core, settings))
    return connectors
