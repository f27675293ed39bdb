"""The reminder tools a turn offers the model (a tool family beside recall's): make a
reminder or a follow-up, list them, cancel one, always in the turn's own conversation.

Every answer says the resolved time back with weekday and zone, so the model can tell
the person exactly when; a wrong call is answered in words the model can act on.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gateway.errors import InputError
from gateway.llm.base import Tool, ToolCall
from gateway.reminders.planner import BY_ASSISTANT, BY_PERSON, Ask, Planner, said_back
from gateway.turns.tools import ToolArguments, read_arguments
from memory.recall import Scope
from memory.storage.models import ScheduleKind

GUIDE = """# Reminders

When the person asks to be reminded, call `reminder_create` with the local time they
mean (their zone, as above) or a duration, then tell them the time it says back.
`follow_up_create` is your own check-in later: use it sparingly. A message behind
`[source: reminder set by …]` is one coming due: write it to them now."""

_WHEN = {
    "type": "string",
    "description": "local YYYY-MM-DDTHH:MM, or an ISO 8601 duration (PT20M, P1D)",
}
_TEXT = {"type": "string", "description": "what it is about, in a few words"}
TOOLS = (
    Tool(
        "reminder_create",
        "Set a reminder the person asked for (it fires even in their quiet hours).",
        {
            "type": "object",
            "properties": {
                "when": _WHEN,
                "text": _TEXT,
                "repeat": {"type": "string", "description": "RRULE, e.g. FREQ=WEEKLY;BYDAY=MO"},
            },
            "required": ["when", "text"],
        },
    ),
    Tool(
        "follow_up_create",
        "Plan your own check-in with the person (waits out quiet hours; a few a day).",
        {
            "type": "object",
            "properties": {"when": _WHEN, "text": _TEXT},
            "required": ["when", "text"],
        },
    ),
    Tool(
        "reminders_list",
        "Pending reminders and follow-ups here, with ids and local times.",
        {"type": "object", "properties": {}},
    ),
    Tool(
        "reminder_cancel",
        "Cancel a pending reminder or follow-up by id.",
        {
            "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 1}},
            "required": ["id"],
        },
    ),
)

_Text = Annotated[str, Field(min_length=1, max_length=1000)]
_When = Annotated[str, Field(min_length=1, max_length=100)]


class _Create(ToolArguments):
    when: _When
    text: _Text
    repeat: Annotated[str, Field(max_length=500)] | None = None


class _FollowUp(ToolArguments):
    when: _When
    text: _Text


class _Cancel(ToolArguments):
    id: int = Field(ge=1)


class ReminderTools:
    """The reminder tools, run in a turn's conversation (a `ToolFamily`)."""

    guide = GUIDE

    def __init__(self, planner: Planner) -> None:
        self._planner = planner
        # No follow-ups on this gateway: the tool is not offered at all.
        self.tools = tuple(
            tool for tool in TOOLS if planner.follow_ups_allowed or tool.name != "follow_up_create"
        )

    async def run(self, scope: Scope, call: ToolCall) -> str:
        try:
            return await self._run(scope, call)
        except InputError as exc:
            return f"Error: {exc}"

    async def _run(self, scope: Scope, call: ToolCall) -> str:
        if call.name == "reminders_list":
            pending = await self._planner.pending(scope.conversation_id)
            if not pending:
                return "Nothing is pending."
            return "\n".join(f"#{s.id}: {said_back(s, scope.timezone)}" for s in pending)
        if call.name == "reminder_cancel":
            cancel = read_arguments(_Cancel, call)
            cancelled = await self._planner.cancel(cancel.id, scope.conversation_id)
            if cancelled is None:
                return (
                    f"Error: there is no pending reminder #{cancel.id} in this conversation "
                    "(reminders_list shows them)."
                )
            return f"Cancelled #{cancelled.id}: {cancelled.text}"
        if call.name == "follow_up_create":
            follow_up = read_arguments(_FollowUp, call)
            ask = Ask(follow_up.when, follow_up.text, kind=ScheduleKind.FOLLOW_UP)
            by = BY_ASSISTANT
        else:
            create = read_arguments(_Create, call)
            ask = Ask(create.when, create.text, create.repeat)
            by = BY_PERSON
        made = await self._planner.create(
            scope.conversation_id, ask, timezone=scope.timezone, by=by, user_id=scope.user_id
        )
        return f"Set #{made.id}: {said_back(made, scope.timezone)}"
