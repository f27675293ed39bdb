"""Platform-neutral messages crossing the boundary between connectors and the core."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Inbound:
    """A message a connector received and verified, normalised."""

    channel: str
    external_user_id: str
    text: str
    # Unique per channel; a redelivery carries the same id and is stored once.
    platform_message_id: str | None = None
    platform_ts: datetime | None = None
    display_name: str = ""
    # Set by the connector for input the person did not type (an edit, a placeholder
    # for a photo); never taken from the platform payload's own text.
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Outbound:
    """A reply for a connector to deliver."""

    message_id: int
    channel: str
    external_user_id: str
    text: str
    reply_to_platform_id: str | None = None
