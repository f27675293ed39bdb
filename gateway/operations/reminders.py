"""A person's reminders and follow-ups as an operator sees them: listed with their
firings, set (as "an operator"), cancelled."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from gateway.errors import Conflict, NotFound, PersonNotFound
from gateway.reminders.planner import BY_OPERATOR, Ask, Planner
from memory.storage.directory import Directory
from memory.storage.models import ScheduleState
from memory.storage.schedules import Fire, Schedules, StoredSchedule

# Of a schedule's firings, how many a listing shows (a repeat may fire thousands of times).
FIRES_SHOWN = 20


class ReminderNotFound(NotFound):
    def __init__(self) -> None:
        super().__init__("reminder")


@dataclass(frozen=True, slots=True)
class ReminderView:
    schedule: StoredSchedule
    timezone: str  # the person's, which its wall-clock times are read in
    fired: int  # how often, in all
    fires: tuple[Fire, ...]  # the newest FIRES_SHOWN, newest first


class PersonReminders:
    def __init__(self, directory: Directory, schedules: Schedules, planner: Planner) -> None:
        self._directory = directory
        self._schedules = schedules
        self._planner = planner

    async def of_person(self, user_id: uuid.UUID) -> list[ReminderView]:
        """Every schedule of the person's own conversation, newest first."""
        conversation_id, timezone = await self._own(user_id)
        views = []
        for schedule in await self._schedules.of_conversation(conversation_id):
            fired, fires = await self._schedules.fires(schedule.id, FIRES_SHOWN)
            views.append(ReminderView(schedule, timezone, fired, tuple(fires)))
        return views

    async def create(self, user_id: uuid.UUID, ask: Ask) -> ReminderView:
        conversation_id, timezone = await self._own(user_id)
        made = await self._planner.create(
            conversation_id, ask, timezone=timezone, by=BY_OPERATOR, user_id=user_id
        )
        return ReminderView(made, timezone, 0, ())

    async def cancel(self, schedule_id: int) -> None:
        """Cancel a pending schedule; one cancelled already is fine (a DELETE sent
        twice), one that has run its course is a `Conflict`."""
        if await self._schedules.cancel(schedule_id) is not None:
            return
        schedule = await self._schedules.get(schedule_id)
        if schedule is None:
            raise ReminderNotFound()
        if schedule.state is ScheduleState.DONE:
            raise Conflict("that reminder has fired for the last time; nothing to cancel")

    async def _own(self, user_id: uuid.UUID) -> tuple[uuid.UUID, str]:
        person = await self._directory.person(user_id)
        if person is None or not person.conversations:
            raise PersonNotFound()
        return person.conversations[0], person.timezone
