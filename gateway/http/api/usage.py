"""GET /api/v1/usage: tokens and cost per day, person and model (DESIGN §12)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from gateway.http.deps import UsageDep
from gateway.http.problems import ApiError, responses
from gateway.operations.usage import GroupBy, Totals, UsageLine

router = APIRouter(tags=["operations"])

# Longer reports are asked for a piece at a time.
MAX_DAYS = 366
DEFAULT_DAYS = 30


class TotalsOut(BaseModel):
    calls: int
    prompt_tokens: int  # the cached ones included
    cached_tokens: int
    completion_tokens: int
    # US dollars of the tokens PARLEY_LLM_PRICES prices (a decimal string); null if none.
    cost_usd: Decimal | None
    unpriced_tokens: int

    @classmethod
    def of(cls, totals: Totals) -> TotalsOut:
        return cls(
            calls=totals.calls,
            prompt_tokens=totals.prompt,
            cached_tokens=totals.cached,
            completion_tokens=totals.completion,
            cost_usd=None if totals.cost is None else round(totals.cost, 6),
            unpriced_tokens=totals.unpriced_tokens,
        )


class UsageLineOut(BaseModel):
    # The day (YYYY-MM-DD, in the person's zone), the person's user id (or a group's
    # conversation id), or the model.
    key: str
    group: bool | None  # by user: whether `key` is a group
    name: str | None  # by user: their display name, or the group's title
    turns: TotalsOut
    background: TotalsOut  # summaries, fact extraction, profile tidying
    total: TotalsOut

    @classmethod
    def of(cls, line: UsageLine) -> UsageLineOut:
        return cls(
            key=line.key,
            group=line.group,
            name=line.name,
            turns=TotalsOut.of(line.turns),
            background=TotalsOut.of(line.background),
            total=TotalsOut.of(line.total),
        )


class UsageOut(BaseModel):
    since: date = Field(serialization_alias="from")
    until: date = Field(serialization_alias="to")
    group_by: GroupBy
    rows: list[UsageLineOut]
    total: TotalsOut


@router.get("/usage", responses=responses(422))
async def usage(
    reports: UsageDep,
    since: Annotated[
        date | None, Query(alias="from", description="first day (default: 29 days before `to`)")
    ] = None,
    until: Annotated[
        date | None, Query(alias="to", description="last day, included (default: today, UTC)")
    ] = None,
    user_id: Annotated[
        uuid.UUID | None, Query(description="one person (or group conversation) only")
    ] = None,
    group_by: GroupBy = GroupBy.DAY,
) -> UsageOut:
    """What the models' calls took, in tokens and (with PARLEY_LLM_PRICES) US dollars,
    summed by day, person or model; turns apart from background work. Days are each
    person's own (midnight to midnight in their zone); groups' days are UTC."""
    last = until or datetime.now(UTC).date()
    first = since or max(last, date.min + timedelta(days=DEFAULT_DAYS)) - timedelta(
        days=DEFAULT_DAYS - 1
    )
    if first > last:
        raise ApiError(422, "`from` is after `to`")
    if (last - first).days >= MAX_DAYS:
        raise ApiError(422, f"ask for at most {MAX_DAYS} days at a time")
    lines = await reports.report(first, last, user_id=user_id, group_by=group_by)
    total = sum((line.total for line in lines), Totals())
    return UsageOut(
        since=first,
        until=last,
        group_by=group_by,
        rows=[UsageLineOut.of(line) for line in lines],
        total=TotalsOut.of(total),
    )
