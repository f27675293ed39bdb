"""What the models cost: tokens and money per day, person and model (DESIGN §12).

Cost is worked out when asked, from the token sums and PARLEY_LLM_PRICES: a price set
or corrected later applies to the days before it too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import date
from decimal import Decimal
from enum import StrEnum

from gateway.settings import ModelPrice
from memory.storage.models import UsageKind
from memory.storage.usage_days import UsageLedger, UsageRow

MILLION = Decimal(1_000_000)


class GroupBy(StrEnum):
    DAY = "day"
    USER = "user"  # a person, or a group (their turns count apart)
    MODEL = "model"


@dataclass(frozen=True, slots=True)
class Totals:
    calls: int = 0
    prompt: int = 0
    cached: int = 0
    completion: int = 0
    # In US dollars, of the tokens with a price; None if none has one.
    cost: Decimal | None = None
    unpriced_tokens: int = 0  # tokens of models PARLEY_LLM_PRICES has no price for

    def __add__(self, other: Totals) -> Totals:
        costs = [c for c in (self.cost, other.cost) if c is not None]
        return Totals(
            self.calls + other.calls,
            self.prompt + other.prompt,
            self.cached + other.cached,
            self.completion + other.completion,
            sum(costs, Decimal(0)) if costs else None,
            self.unpriced_tokens + other.unpriced_tokens,
        )


@dataclass(frozen=True, slots=True)
class UsageLine:
    key: str  # the day, the person's (or group's) id, or the model
    group: bool | None  # by user: whether the key is a group
    name: str | None  # by user: their display name, or the group's title
    turns: Totals
    background: Totals  # summaries, fact extraction, profile tidying

    @property
    def total(self) -> Totals:
        return self.turns + self.background


def cost_of(row: UsageRow, price: ModelPrice | None) -> Totals:
    tokens = row.prompt + row.completion
    if price is None:
        return Totals(row.calls, row.prompt, row.cached, row.completion, None, tokens)
    cached_price = price.prompt if price.cached is None else price.cached
    # Prompt tokens include the cached ones, which cost the cached price instead.
    cost = (
        (row.prompt - row.cached) * price.prompt
        + row.cached * cached_price
        + row.completion * price.completion
    ) / MILLION
    return Totals(row.calls, row.prompt, row.cached, row.completion, cost)


class UsageReports:
    def __init__(self, ledger: UsageLedger, prices: Mapping[str, ModelPrice]) -> None:
        self._ledger = ledger
        self._prices = prices

    async def report(
        self, first: date, last: date, *, user_id: uuid.UUID | None, group_by: GroupBy
    ) -> list[UsageLine]:
        rows = await self._ledger.rows(first, last, subject=user_id)
        found = lines(rows, self._prices, group_by)
        if group_by is not GroupBy.USER:
            return found
        names = await self._ledger.names([uuid.UUID(line.key) for line in found])
        return [replace(line, name=names.get(uuid.UUID(line.key), "")) for line in found]


def lines(
    rows: Iterable[UsageRow], prices: Mapping[str, ModelPrice], group_by: GroupBy
) -> list[UsageLine]:
    key: Callable[[UsageRow], str] = {
        GroupBy.DAY: lambda r: r.day.isoformat(),
        GroupBy.USER: lambda r: str(r.subject),
        GroupBy.MODEL: lambda r: r.model,
    }[group_by]
    sums: dict[str, tuple[bool, Totals, Totals]] = {}
    for row in rows:
        group, turns, background = sums.get(key(row), (row.group, Totals(), Totals()))
        cost = cost_of(row, prices.get(row.model))
        if row.kind is UsageKind.TURN:
            turns += cost
        else:
            background += cost
        sums[key(row)] = (group, turns, background)
    return [
        UsageLine(k, group if group_by is GroupBy.USER else None, None, turns, background)
        for k, (group, turns, background) in sorted(sums.items())
    ]
