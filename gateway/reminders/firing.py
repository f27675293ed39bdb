"""Firing what is due: each due schedule becomes a turn of its conversation, once.

A sweep asks the database what is due by now (one indexed query) and fires each: one
transaction inserts the fire row, moves the schedule on and stores the message that
starts the turn (`Schedules.fire`). A replica that finds the row taken did nothing; a
process killed before the commit fired nothing, and the next sweep fires it. The turn
then runs as any turn does, its reply delivered through the outbox.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

import structlog

from gateway.channels.port import Capabilities
from gateway.clock import Clock
from gateway.events.hub import Hub
from gateway.metrics import Metrics
from gateway.reminders.times import (
    BadRepeat,
    QuietHours,
    catch_up,
    describe,
    format_local,
    instant,
    parse_local,
    read_repeat,
    wall_clock,
)
from memory.provenance import FIRING_SOURCE
from memory.storage.messages import Messages, NewMessage, StoredMessage
from memory.storage.models import FireOutcome, Role, ScheduleKind
from memory.storage.schedules import Due, Firing, Schedules, StoredSchedule
from memory.zones import zone

log = structlog.get_logger(__name__)

BATCH = 100
# Held firings are looked for on every sweep while this replica knows of some, else on
# every this many (another replica's): a person's next message sends them soon after.
RELEASE_EVERY = 12
HELD_REASON = "the platform takes no free text this long after the person last wrote"


class TurnRequests(Protocol):
    def request(self, conversation_id: uuid.UUID) -> None: ...


class Firings:
    def __init__(
        self,
        *,
        schedules: Schedules,
        messages: Messages,
        turns: TurnRequests,
        hub: Hub,
        clock: Clock,
        metrics: Metrics,
        channels: Mapping[str, Capabilities],
        grace: timedelta,
        quiet: QuietHours | None,
        follow_ups_per_day: int,
    ) -> None:
        self._schedules = schedules
        self._messages = messages
        self._turns = turns
        self._hub = hub
        self._clock = clock
        self._metrics = metrics
        self._grace = grace
        self._channels = channels
        self._sweeps = 0
        self._holding = True  # unknown at start: looked for on the first sweep
        self._quiet = quiet
        self._follow_ups_per_day = follow_ups_per_day

    async def sweep(self) -> int:
        """Fire everything due by now, and now and then send what was held for people
        who have written since; how many fired."""
        fired = await self._fire_due()
        if self._holding or self._sweeps % RELEASE_EVERY == 0:
            await self.release()
        self._sweeps += 1
        return fired

    async def _fire_due(self) -> int:
        fired = 0
        while True:
            now = self._clock.now()
            due = await self._schedules.due(now, BATCH)
            for one in due:
                try:
                    fired += await self._fire(one, now)
                except Exception:
                    # One bad row must not hold up the others; it is tried again.
                    log.exception("a reminder could not fire", schedule_id=one.schedule.id)
            if len(due) < BATCH:
                return fired

    async def _fire(self, due: Due, now: datetime) -> int:
        schedule = due.schedule
        assert schedule.next_local is not None
        assert schedule.next_due_at is not None
        where = zone(due.timezone or schedule.zone)
        wall = parse_local(schedule.next_local)
        # The person moved to another zone: the same wall-clock time, there.
        there = instant(wall, where)
        if there > now and there != schedule.next_due_at:
            await self._schedules.move(schedule.id, schedule.next_due_at, there)
            return 0
        if schedule.kind is ScheduleKind.FOLLOW_UP and due.follow_ups:
            quiet_end = None if self._quiet is None else self._quiet.ends(wall_clock(now, where))
            if quiet_end is not None:  # waits until they end; its due time moves there
                await self._schedules.move(
                    schedule.id, schedule.next_due_at, instant(quiet_end, where)
                )
                return 0
        try:
            rule = (
                None
                if schedule.repeat is None
                else read_repeat(schedule.repeat, parse_local(schedule.starts_local), near=wall)
            )
        except BadRepeat:  # imported from a file: fires this once, then is done
            log.warning("a reminder's repeat is unreadable", schedule_id=schedule.id)
            rule = None
        catch = catch_up(rule, wall, now, where)
        late = now - schedule.next_due_at > self._grace
        outcome, detail = FireOutcome.LATE if late else FireOutcome.SENT, None
        if schedule.kind is ScheduleKind.FOLLOW_UP:
            skipped = await self._skipped(due, now, where)
            if skipped is not None:
                outcome, detail = FireOutcome.SKIPPED, skipped
        message = None
        if outcome is not FireOutcome.SKIPPED:
            addressee, unsent = await self._addressee(schedule, now)
            if addressee is None:
                outcome, detail = unsent
            else:
                note = _late_note(wall, where, catch.passed) if late else ""
                message = _firing(schedule, addressee, where, note)
        taken, stored = await self._schedules.fire(
            schedule,
            Firing(
                due_at=schedule.next_due_at,
                outcome=outcome,
                missed=catch.passed - 1,
                detail=detail,
                next_local=None if catch.following is None else format_local(catch.following),
                next_due_at=None if catch.following is None else instant(catch.following, where),
                message=message,
            ),
            now=now,
        )
        if not taken:
            return 0  # another replica fired it
        self._metrics.reminder_fires.labels(outcome.value).inc()
        self._holding = self._holding or outcome is FireOutcome.HELD
        self._metrics.reminder_lag_seconds.observe((now - schedule.next_due_at).total_seconds())
        log.info(
            "reminder fired",
            schedule_id=schedule.id,
            outcome=outcome.value,
            missed=catch.passed - 1,
        )
        if stored is not None:
            self._hub.message(stored)
            self._turns.request(stored.conversation_id)
        return 1

    async def _skipped(self, due: Due, now: datetime, where: ZoneInfo) -> str | None:
        """Why a follow-up is not sent, if it is not."""
        if not due.follow_ups:
            return "the person turned follow-ups off"
        midnight = datetime.combine(wall_clock(now, where).date(), time())
        sent = await self._schedules.sent_follow_ups(
            due.schedule.conversation_id, instant(midnight, where)
        )
        if sent >= self._follow_ups_per_day:
            return f"{self._follow_ups_per_day} follow-ups were sent that day already"
        return None

    async def _addressee(
        self, schedule: StoredSchedule, now: datetime
    ) -> tuple[StoredMessage | None, tuple[FireOutcome, str]]:
        """The typed message whose chat the firing's reply goes to: the newest on the
        schedule's channel, else on any; on another channel if that one takes no free
        text by now (WhatsApp's window) and no reminder template. None, with why not,
        if there is none: it fails, or it is held until the person writes again."""
        conversation_id = schedule.conversation_id
        addressee = await self._messages.last_from(conversation_id, schedule.channel)
        if addressee is None and schedule.channel is not None:
            addressee = await self._messages.last_from(conversation_id, None)
        if addressee is None:
            return None, (FireOutcome.FAILED, "nobody has written into this conversation yet")
        if self._open(addressee, now):
            return addressee, (FireOutcome.SENT, "")
        elsewhere = await self._messages.last_from(conversation_id, None, not_on=addressee.channel)
        if elsewhere is not None and self._open(elsewhere, now):
            return elsewhere, (FireOutcome.SENT, "")
        return None, (
            FireOutcome.HELD,
            f"{HELD_REASON} on {addressee.channel} (no reminder template is set); "
            "held until the person writes again",
        )

    def _open(self, addressee: StoredMessage, now: datetime) -> bool:
        """Whether the platform takes a reminder in that chat now."""
        capabilities = self._channels.get(addressee.channel)
        if capabilities is None or capabilities.free_text_window is None:
            return True
        if capabilities.reminders_past_window:
            return True
        return now - addressee.sent_at <= capabilities.free_text_window

    async def release(self) -> int:
        """Send the held firings of people who have written since; how many."""
        released = 0
        now = self._clock.now()
        held = await self._schedules.held(BATCH)
        # Looked for again on the next sweep while any is held.
        self._holding = bool(held)
        for one in held:
            addressee = None
            if one.written:
                addressee, _ = await self._addressee(one.schedule, now)
            if addressee is None:
                continue  # silent, or written on a channel still closed: held on
            where = zone(one.timezone or one.schedule.zone)
            wall = wall_clock(one.due_at, where)
            message = _firing(one.schedule, addressee, where, _held_note(wall, where))
            stored = await self._schedules.release(one, message, now=now)
            if stored is not None:
                released += 1
                self._hub.message(stored)
                self._turns.request(stored.conversation_id)
        return released


def _firing(
    schedule: StoredSchedule, addressee: StoredMessage, where: ZoneInfo, note: str
) -> NewMessage:
    """The message that makes a firing a turn, addressed to `addressee`'s chat; its
    text is what is sent where no model writes it."""
    set_on = wall_clock(schedule.created_at, where)
    source = f"{FIRING_SOURCE} {schedule.created_by} on {set_on:%a} {set_on.day} {set_on:%b %Y}"
    return NewMessage(
        role=Role.USER,
        channel=addressee.channel,
        text=f"Reminder: {schedule.text}{note}",
        identity_id=addressee.identity_id,
        source=source,
    )


def _late_note(wall: datetime, where: ZoneInfo, passed: int) -> str:
    missed = "" if passed <= 1 else f", and {passed - 1} more times after that"
    return (
        f"\n(This was due {describe(wall, where)}{missed}; "
        "it comes late because I was offline then.)"
    )


def _held_note(wall: datetime, where: ZoneInfo) -> str:
    return f"\n(This was due {describe(wall, where)}; I could only send it once you wrote again.)"
