"""Daily token budgets (DESIGN §12): past a person's (or a group's) cap for the day the
model is not asked; they are told once, and their messages are stored as always."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from memory.storage.conversations import TurnState
from memory.storage.usage_days import Payer, UsageLedger, payer_for

BUDGET_NOTICE = (
    "I've reached today's limit for our conversation, so I can't answer until midnight "
    "(your time). Everything you write is saved, and I'll read it then."
)


class Verdict(Enum):
    OPEN = "open"  # ask the model
    NOTICE = "notice"  # spent: tell them, once today
    QUIET = "quiet"  # spent, and told already: store, answer nothing


@dataclass(frozen=True, slots=True)
class DailyCaps:
    per_person: int | None = None
    per_group: int | None = None


@dataclass(frozen=True, slots=True)
class Today:
    spent: int
    cap: int
    group: bool  # a group's day is UTC; a person's, their own zone's


class Budgets:
    def __init__(self, caps: DailyCaps, ledger: UsageLedger) -> None:
        self._caps = caps
        self._ledger = ledger

    async def today(self, conversation_id: uuid.UUID, now: datetime) -> Today | None:
        """What the conversation's payer has spent today, against their cap (None: no
        cap applies)."""
        found = await self._ledger.payer(conversation_id)
        if found is None:
            return None
        payer, own = found
        cap = self._cap(payer.group, own)
        if cap is None:
            return None
        return Today(await self._ledger.spent(payer, payer.day(now)), cap, payer.group)

    def payer(self, state: TurnState) -> Payer:
        return payer_for(state.conversation_id, state.user_id, state.group, state.timezone)

    async def verdict(self, state: TurnState, now: datetime) -> Verdict:
        cap = self._cap(state.group, state.daily_tokens)
        if cap is None:
            return Verdict.OPEN  # no read at all where nothing is capped
        payer = self.payer(state)
        today = payer.day(now)
        if await self._ledger.spent(payer, today) < cap:
            return Verdict.OPEN
        return Verdict.QUIET if state.budget_notice_on == today else Verdict.NOTICE

    def _cap(self, group: bool, own: int | None) -> int | None:
        """A group's cap; a person's own, else the deployment's (None: no cap)."""
        if group:
            return self._caps.per_group
        return own if own is not None else self._caps.per_person
