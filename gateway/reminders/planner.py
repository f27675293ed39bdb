"""Making, listing and cancelling reminders and follow-ups: one place that the model's
tools, the chat commands and the operator API all go through."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from gateway.clock import Clock
from gateway.errors import InputError
from gateway.reminders.times import (
    BadWhen,
    describe,
    describe_repeat,
    first_wall,
    format_local,
    instant,
    parse_local,
    read_repeat,
    resolve_when,
)
from memory.storage.models import ScheduleKind
from memory.storage.schedules import NewSchedule, Schedules, StoredSchedule
from memory.zones import zone

MAX_TEXT = 1000
# Who set a schedule, as its firing's source line names them.
BY_PERSON = "the person"
BY_ASSISTANT = "the assistant"
BY_OPERATOR = "an operator"


class FollowUpsOff(InputError):
    """The person said `/followups off`, or the gateway makes none."""


@dataclass(frozen=True, slots=True)
class Ask:
    """A schedule asked for: `when` a local time in the person's zone or a duration."""

    when: str
    text: str
    repeat: str | None = None
    kind: ScheduleKind = ScheduleKind.REMINDER
    channel: str | None = None


class Planner:
    def __init__(self, schedules: Schedules, clock: Clock, *, follow_ups_per_day: int) -> None:
        self._schedules = schedules
        self._clock = clock
        self._follow_ups_per_day = follow_ups_per_day

    @property
    def follow_ups_allowed(self) -> bool:
        return self._follow_ups_per_day > 0

    async def create(
        self,
        conversation_id: uuid.UUID,
        ask: Ask,
        *,
        timezone: str,
        by: str,
        user_id: uuid.UUID | None,
    ) -> StoredSchedule:
        """Store a schedule; `InputError` (in words a model or a person can act on) for
        a time in the past, a repeat that is no RRULE, an empty text."""
        text = " ".join(ask.text.split())
        if not text:
            raise InputError("the text of a reminder is empty")
        if len(text) > MAX_TEXT:
            raise InputError(f"the text of a reminder is at most {MAX_TEXT} characters")
        if ask.kind is ScheduleKind.FOLLOW_UP:
            await self._check_follow_ups(user_id)
        where = zone(timezone)
        now = self._clock.now()
        start = resolve_when(ask.when, now, where)
        rule = None if ask.repeat is None else read_repeat(ask.repeat, start)
        # Off the event loop: a rule with no due time (BYSETPOS=6 of Mondays) is walked
        # to the year 9999 before it is found to have none.
        first = await asyncio.to_thread(first_wall, rule, start)
        if first is None:
            raise BadWhen("that repeat has no time from then on")
        due = instant(first, where)
        if due <= now:
            raise BadWhen(f"{describe(first, where)} is in the past")
        return await self._schedules.add(
            NewSchedule(
                conversation_id=conversation_id,
                kind=ask.kind,
                text=text,
                starts_local=format_local(start),
                zone=where.key,
                repeat=None if ask.repeat is None else ask.repeat.strip().removeprefix("RRULE:"),
                channel=ask.channel,
                created_by=by,
                next_local=format_local(first),
                next_due_at=due,
            ),
            now=now,
        )

    async def _check_follow_ups(self, user_id: uuid.UUID | None) -> None:
        if not self.follow_ups_allowed:
            raise FollowUpsOff("follow-ups are turned off on this gateway")
        if user_id is None:
            raise FollowUpsOff("follow-ups are for a person's own conversation, not a group")
        if not await self._schedules.follow_ups_on(user_id):
            raise FollowUpsOff("the person turned follow-ups off (/followups off)")

    async def pending(self, conversation_id: uuid.UUID) -> list[StoredSchedule]:
        return await self._schedules.pending(conversation_id)

    async def cancel(self, schedule_id: int, conversation_id: uuid.UUID) -> StoredSchedule | None:
        """Cancel a pending schedule of this conversation; None if it has none by that id."""
        return await self._schedules.cancel(schedule_id, conversation_id)

    async def set_follow_ups(self, conversation_id: uuid.UUID, user_id: uuid.UUID, on: bool) -> int:
        """Turn a person's follow-ups on or off; off cancels the pending ones (how many)."""
        await self._schedules.set_follow_ups(user_id, on)
        return 0 if on else await self._schedules.cancel_follow_ups(conversation_id)

    async def rezone(self, user_id: uuid.UUID, timezone: str) -> None:
        """The person's zone changed: their schedules keep their wall-clock times there."""
        where = zone(timezone)
        for schedule in await self._schedules.of_person(user_id):
            if schedule.next_local is None or schedule.next_due_at is None:
                continue
            moved = instant(parse_local(schedule.next_local), where)
            if moved != schedule.next_due_at:
                await self._schedules.move(schedule.id, schedule.next_due_at, moved)


def said_back(schedule: StoredSchedule, timezone: str) -> str:
    """A schedule as the person reads it: when (local, weekday, zone), what, how often."""
    when = (
        "not pending"
        if schedule.next_local is None
        else describe(parse_local(schedule.next_local), zone(timezone))
    )
    kind = "follow-up" if schedule.kind is ScheduleKind.FOLLOW_UP else "reminder"
    return f"{when} — {kind}, {describe_repeat(schedule.repeat)}: {schedule.text}"
