"""How the gateway is doing, as the dashboard's Health page shows it (GET /api/v1/stats):
channels, the work waiting (and for how long), and the numbers it charts — messages per
channel and day, the prompt's size per turn and per day, to see memory keep it bounded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gateway.channels.port import Connector
from gateway.clock import Clock
from gateway.inbox.core import Core
from gateway.replicas.leader import LEASE_PREFIX
from memory.archive.archive import Archive
from memory.archive.reads import Backlog
from memory.storage.leases import Leases
from memory.storage.stats import DayCount, DayPrompt, LeaseView, Queue, Stats, TurnPrompt

# Turns charted one by one (the newest of the window): enough to see a trend.
TURNS_CHARTED = 500


@dataclass(frozen=True, slots=True)
class ChannelHealth:
    channel: str
    enabled: bool
    last_inbound_at: datetime | None
    last_sent_at: datetime | None
    # The replica holding the channel's connection, where only one may (Discord).
    leader: str | None
    # Where the channel holds a connection of its own: how it goes, as its holder last
    # said, or "down" when no replica holds it; None: the platform or browser calls in.
    connection: str | None


@dataclass(frozen=True, slots=True)
class Report:
    replica: str  # this replica's name in leases
    channels: list[ChannelHealth]
    archive: Backlog
    deliveries: Queue  # replies stored that their platform has not taken yet
    # Every UTC day of the window, oldest first: the charts' days, those with nothing too.
    days: list[str]
    messages_per_day: list[DayCount]
    prompt_per_day: list[DayPrompt]
    prompt_per_turn: list[TurnPrompt]  # the window's newest turns, oldest first
    # What a prompt may never exceed (the context window less the reply's room).
    prompt_limit: int


class Overview:
    def __init__(
        self,
        *,
        stats: Stats,
        leases: Leases,
        archive: Archive,
        core: Core,
        connectors: Sequence[Connector],
        clock: Clock,
        prompt_limit: int,
    ) -> None:
        self._stats = stats
        self._leases = leases
        self._archive = archive
        self._core = core
        self._enabled = {connector.channel for connector in connectors}
        self._clock = clock
        self._prompt_limit = prompt_limit

    async def report(self, days: int) -> Report:
        """The gateway now, with the charts of the last `days` UTC days (today's too)."""
        now = self._clock.now()
        since = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
        return Report(
            replica=self._leases.holder,
            channels=await self._channels(now),
            archive=await self._archive.backlog(),
            deliveries=await self._stats.deliveries_waiting(),
            days=[(since + timedelta(days=n)).date().isoformat() for n in range(days)],
            messages_per_day=await self._stats.messages_per_day(since),
            prompt_per_day=await self._stats.prompt_per_day(since),
            prompt_per_turn=await self._stats.prompt_per_turn(since, TURNS_CHARTED),
            prompt_limit=self._prompt_limit,
        )

    async def _channels(self, now: datetime) -> list[ChannelHealth]:
        seen = {c.channel: c for c in await self._stats.channels()}
        # A singleton is named for its channel first: "discord-gateway", "telegram-polling".
        # Only what this configuration runs: a lease of what no longer runs (Telegram
        # polling, since switched to a webhook) is old news.
        running = set(self._core.singletons)
        leases = {
            lease.name.removeprefix(LEASE_PREFIX).split("-", 1)[0]: lease
            for lease in await self._stats.leases(LEASE_PREFIX)
            if lease.name in running
        }
        return [
            ChannelHealth(
                channel=channel,
                enabled=channel in self._enabled,
                last_inbound_at=seen[channel].last_inbound_at if channel in seen else None,
                last_sent_at=seen[channel].last_sent_at if channel in seen else None,
                leader=_holder(leases.get(channel), now),
                connection=_connection(leases.get(channel), now),
            )
            for channel in sorted(self._enabled | seen.keys())
        ]


def _holder(lease: LeaseView | None, now: datetime) -> str | None:
    return None if lease is None or lease.expires_at <= now else lease.holder


def _connection(lease: LeaseView | None, now: datetime) -> str | None:
    if lease is None:
        return None
    if lease.expires_at <= now:
        return "down"  # its holder stopped renewing, and nobody took over yet
    return lease.state or "starting"
