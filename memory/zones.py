"""Time zones by IANA name, never failing on a bad one."""

from __future__ import annotations

import zoneinfo
from functools import cache


@cache
def zone(name: str) -> zoneinfo.ZoneInfo:
    """The zone called `name`; UTC if there is no such zone (stored names are
    validated on the way in, so this only guards against a zone database change)."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return zoneinfo.ZoneInfo("UTC")


def known_zone(name: str) -> bool:
    """Whether `name` is a time zone the zone database has."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True
