"""How the gateway is doing: channels, the archive's backlog, the work waiting (and for
how long), and the numbers the dashboard charts (messages per channel and day; the
prompt's size per turn and per day, to see memory keep it bounded)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from gateway.channels.leader import LEASE_PREFIX
from gateway.http.deps import ServicesDep
from gateway.http.problems import responses
from memory.storage.stats import LeaseView, Queue

# Turns charted one by one (the newest of the window): enough to see a trend.
TURNS_CHARTED = 500

router = APIRouter(tags=["operations"])


class ChannelOut(BaseModel):
    channel: str
    enabled: bool
    last_inbound_at: datetime | None
    last_sent_at: datetime | None
    # The replica holding the channel's connection, where only one may (Discord).
    leader: str | None
    # Where the channel holds a connection of its own (Discord; Telegram polling): how
    # it goes, as its holder last said ("connected", "reconnecting…"), or "down" when no
    # replica holds it. None: the platform or the browser calls in (webhooks, web chat).
    connection: str | None


class ArchiveOut(BaseModel):
    chunks: dict[str, int]
    to_extract: int
    # When the oldest chunk still waiting for its summary was cut; None: none waits.
    oldest_waiting: datetime | None


class DayCountOut(BaseModel):
    day: str
    channel: str
    messages: int


class DayPromptOut(BaseModel):
    day: str
    turns: int
    mean: int
    largest: int


class TurnOut(BaseModel):
    at: datetime
    prompt_tokens: int


class QueueOut(BaseModel):
    waiting: int
    # Since when the oldest one has waited (a chunk: since it was cut; a reply: since it
    # was written); None: nothing waits.
    oldest_at: datetime | None

    @classmethod
    def of(cls, queue: Queue) -> QueueOut:
        return cls(waiting=queue.depth, oldest_at=queue.oldest_at)


class QueuesOut(BaseModel):
    summaries: QueueOut  # archive chunks still to summarise (failing ones not counted)
    extractions: QueueOut  # summarised chunks whose facts are still to take
    deliveries: QueueOut  # replies stored that their platform has not taken yet


class StatsOut(BaseModel):
    replica: str  # this replica's name in leases
    channels: list[ChannelOut]
    archive: ArchiveOut
    queues: QueuesOut
    # Every UTC day of the window, oldest first: the charts' days, those with nothing too.
    days: list[str]
    messages_per_day: list[DayCountOut]
    prompt_tokens_per_day: list[DayPromptOut]
    # The newest turns of the window (up to 500), oldest first.
    prompt_tokens_per_turn: list[TurnOut]
    # What a prompt may never exceed (the context window less the reply's room).
    prompt_limit: int


@router.get("/stats", responses=responses(422))
async def stats(services: ServicesDep, days: Annotated[int, Query(ge=1, le=366)] = 30) -> StatsOut:
    """Channels with when they last heard and sent; the archive's backlog; how many
    summaries, fact extractions and deliveries wait, and since when the oldest has; per
    UTC day over the last `days`, messages by channel and the prompt tokens of model
    replies (estimated when the reply was written: mean and largest), and those of the
    newest turns one by one."""
    repos = services.repos
    now = services.clock.now()
    since = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    seen = {c.channel: c for c in await repos.stats.channels()}
    # A singleton is named for its channel first: "discord-gateway", "telegram-polling".
    # Only what this configuration runs: a lease of what no longer runs (Telegram polling,
    # since switched to a webhook) is old news.
    running = set(services.core.singletons)
    leases = {
        lease.name.removeprefix(LEASE_PREFIX).split("-", 1)[0]: lease
        for lease in await repos.stats.leases(LEASE_PREFIX)
        if lease.name in running
    }
    held = {channel: lease.holder for channel, lease in leases.items() if lease.expires_at > now}
    enabled = {connector.channel for connector in services.connectors}
    backlog = await services.archive.backlog()
    queues = await repos.stats.queues()
    return StatsOut(
        replica=repos.leases.holder,
        channels=[
            ChannelOut(
                channel=channel,
                enabled=channel in enabled,
                last_inbound_at=seen[channel].last_inbound_at if channel in seen else None,
                last_sent_at=seen[channel].last_sent_at if channel in seen else None,
                leader=held.get(channel),
                connection=_connection(leases.get(channel), now),
            )
            for channel in sorted(enabled | seen.keys())
        ],
        archive=ArchiveOut(
            chunks={state.value: n for state, n in backlog.chunks.items()},
            to_extract=backlog.to_extract,
            oldest_waiting=backlog.oldest_waiting,
        ),
        queues=QueuesOut(
            summaries=QueueOut.of(queues.summaries),
            extractions=QueueOut.of(queues.extractions),
            deliveries=QueueOut.of(queues.deliveries),
        ),
        days=[(since + timedelta(days=n)).date().isoformat() for n in range(days)],
        messages_per_day=[
            DayCountOut(day=d.day, channel=d.channel, messages=d.messages)
            for d in await repos.stats.messages_per_day(since)
        ],
        prompt_tokens_per_day=[
            DayPromptOut(day=d.day, turns=d.turns, mean=d.mean, largest=d.largest)
            for d in await repos.stats.prompt_per_day(since)
        ],
        prompt_tokens_per_turn=[
            TurnOut(at=t.at, prompt_tokens=t.tokens)
            for t in await repos.stats.prompt_per_turn(since, TURNS_CHARTED)
        ],
        prompt_limit=services.settings.llm_context_tokens - services.settings.llm_max_reply_tokens,
    )


def _connection(lease: LeaseView | None, now: datetime) -> str | None:
    if lease is None:
        return None
    if lease.expires_at <= now:
        return "down"  # its holder stopped renewing, and nobody took over yet
    return lease.state or "starting"
