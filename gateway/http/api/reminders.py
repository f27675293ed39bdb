"""A person's reminders and follow-ups (DESIGN §9): listed with their firings, set by
an operator, cancelled."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from gateway.http.api.inputs import Input
from gateway.http.api.once import OnceDep
from gateway.http.deps import RemindersDep
from gateway.http.paging import Page
from gateway.http.problems import responses
from gateway.operations.reminders import ReminderView
from gateway.reminders.planner import MAX_TEXT, Ask
from gateway.reminders.times import instant, parse_local
from gateway.text import StorableText
from memory.storage.models import FireOutcome, ScheduleKind, ScheduleState
from memory.zones import zone

router = APIRouter(tags=["reminders"])


class FiringOut(BaseModel):
    due_at: datetime
    fired_at: datetime
    outcome: FireOutcome
    # Due times of a repeat that passed while the gateway was down, collapsed into this.
    missed: int
    detail: str | None


class ReminderOut(BaseModel):
    id: int
    kind: ScheduleKind
    text: str
    # The next due time as a wall-clock time with its offset and the person's zone
    # (RFC 9557: `2027-03-02T09:00:00+01:00[Europe/Berlin]`); null once it is over.
    when: str | None
    due_at: datetime | None  # the same instant in UTC
    repeat: str | None  # an RFC 5545 RRULE
    state: ScheduleState
    channel: str | None  # null: wherever the person last wrote
    created_by: str
    created_at: datetime
    fired: int  # how often, in all
    firings: list[FiringOut]  # the newest ones, newest first

    @classmethod
    def of(cls, view: ReminderView) -> ReminderOut:
        schedule = view.schedule
        return cls(
            id=schedule.id,
            kind=schedule.kind,
            text=schedule.text,
            when=None
            if schedule.next_local is None
            else _rfc9557(schedule.next_local, view.timezone),
            due_at=schedule.next_due_at,
            repeat=schedule.repeat,
            state=schedule.state,
            channel=schedule.channel,
            created_by=schedule.created_by,
            created_at=schedule.created_at,
            fired=view.fired,
            firings=[
                FiringOut(
                    due_at=f.due_at,
                    fired_at=f.fired_at,
                    outcome=f.outcome,
                    missed=f.missed,
                    detail=f.detail,
                )
                for f in view.fires
            ],
        )


class ReminderIn(Input):
    when: str = Field(
        min_length=1,
        max_length=100,
        description="a wall-clock time in the person's zone, YYYY-MM-DDTHH:MM, or an "
        "ISO 8601 duration from now (PT20M, P1D)",
        examples=["2027-03-02T09:00"],
    )
    text: Annotated[StorableText, Field(min_length=1, max_length=MAX_TEXT)]
    repeat: str | None = Field(
        default=None,
        max_length=500,
        description="an RFC 5545 RRULE",
        examples=["FREQ=WEEKLY;BYDAY=MO"],
    )
    kind: ScheduleKind = ScheduleKind.REMINDER
    channel: Literal["telegram", "discord", "whatsapp", "webchat"] | None = Field(
        default=None, description="where to send it; by default where the person last wrote"
    )


ReminderPage = Page[ReminderOut]


@router.get("/users/{user_id}/reminders", responses=responses(404))
async def list_reminders(reminders: RemindersDep, user_id: uuid.UUID) -> ReminderPage:
    """The person's reminders and follow-ups, newest first: pending, done and cancelled."""
    found = await reminders.of_person(user_id)
    return ReminderPage(items=[ReminderOut.of(view) for view in found], next_cursor=None)


@router.post(
    "/users/{user_id}/reminders",
    status_code=201,
    response_model=ReminderOut,
    responses=responses(404, 409, 422),
)
async def create_reminder(
    reminders: RemindersDep, once: OnceDep, user_id: uuid.UUID, body: ReminderIn
) -> Response:
    """Set a reminder (or a follow-up) for the person; its firing names "an operator"
    as who set it. A time in the past or a repeat that is no RRULE is a 422."""

    async def create() -> ReminderOut:
        ask = Ask(body.when, body.text, body.repeat, body.kind, body.channel)
        return ReminderOut.of(await reminders.create(user_id, ask))

    return await once.run(create, status_code=201, about=lambda _: user_id)


@router.delete("/reminders/{reminder_id}", status_code=204, responses=responses(404, 409))
async def cancel_reminder(
    reminders: RemindersDep, reminder_id: Annotated[int, Path(ge=1, le=2**63 - 1)]
) -> Response:
    """Cancel a pending reminder (again: still 204)."""
    await reminders.cancel(reminder_id)
    return Response(status_code=204)


def _rfc9557(local: str, timezone: str) -> str:
    where = zone(timezone)
    moment = instant(parse_local(local), where).astimezone(where)
    return f"{moment.isoformat()}[{where.key}]"
