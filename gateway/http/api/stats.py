"""GET /api/v1/stats: how the gateway is doing (`gateway.operations.overview`), on the wire."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from gateway.http.deps import OverviewDep
from gateway.http.problems import responses
from gateway.operations.overview import ChannelHealth, Report
from memory.archive.reads import Backlog
from memory.storage.stats import DayCount, DayPrompt, Queue, TurnPrompt

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

    @classmethod
    def of(cls, channel: ChannelHealth) -> ChannelOut:
        return cls(
            channel=channel.channel,
            enabled=channel.enabled,
            last_inbound_at=channel.last_inbound_at,
            last_sent_at=channel.last_sent_at,
            leader=channel.leader,
            connection=channel.connection,
        )


class ArchiveOut(BaseModel):
    # Archive chunks by state (pending and failed ones wait for their summary); how many
    # wait, and since when, is `queues`.
    chunks: dict[str, int]

    @classmethod
    def of(cls, backlog: Backlog) -> ArchiveOut:
        return cls(chunks={state.value: n for state, n in backlog.chunks.items()})


class DayCountOut(BaseModel):
    day: str
    channel: str
    messages: int

    @classmethod
    def of(cls, count: DayCount) -> DayCountOut:
        return cls(day=count.day, channel=count.channel, messages=count.messages)


class DayPromptOut(BaseModel):
    day: str
    turns: int
    mean: int
    largest: int

    @classmethod
    def of(cls, prompt: DayPrompt) -> DayPromptOut:
        return cls(day=prompt.day, turns=prompt.turns, mean=prompt.mean, largest=prompt.largest)


class TurnOut(BaseModel):
    at: datetime
    prompt_tokens: int

    @classmethod
    def of(cls, turn: TurnPrompt) -> TurnOut:
        return cls(at=turn.at, prompt_tokens=turn.tokens)


class QueueOut(BaseModel):
    waiting: int
    # Since when the oldest one has waited (a chunk: since it was cut; a reply: since it
    # was written); None: nothing waits.
    oldest_at: datetime | None

    @classmethod
    def of(cls, queue: Queue) -> QueueOut:
        return cls(waiting=queue.depth, oldest_at=queue.oldest_at)


class QueuesOut(BaseModel):
    # Archive chunks still to summarise: pending, or failing and retried.
    summaries: QueueOut
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

    @classmethod
    def of(cls, report: Report) -> StatsOut:
        return cls(
            replica=report.replica,
            channels=[ChannelOut.of(c) for c in report.channels],
            archive=ArchiveOut.of(report.archive),
            queues=QueuesOut(
                summaries=QueueOut.of(report.archive.summaries),
                extractions=QueueOut.of(report.archive.extractions),
                deliveries=QueueOut.of(report.deliveries),
            ),
            days=report.days,
            messages_per_day=[DayCountOut.of(d) for d in report.messages_per_day],
            prompt_tokens_per_day=[DayPromptOut.of(d) for d in report.prompt_per_day],
            prompt_tokens_per_turn=[TurnOut.of(t) for t in report.prompt_per_turn],
            prompt_limit=report.prompt_limit,
        )


@router.get("/stats", responses=responses(422))
async def stats(overview: OverviewDep, days: Annotated[int, Query(ge=1, le=366)] = 30) -> StatsOut:
    """Channels with when they last heard and sent; archive chunks by state; how many
    summaries, fact extractions and deliveries wait, and since when the oldest has; per
    UTC day over the last `days`, messages by channel and the prompt tokens of model
    replies (estimated when the reply was written: mean and largest), and those of the
    newest turns one by one."""
    return StatsOut.of(await overview.report(days))
