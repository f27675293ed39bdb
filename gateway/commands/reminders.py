"""`/reminders` lists what is pending, `/reminders cancel N` cancels one, and
`/followups off|on` says whether the assistant may follow up on its own."""

from __future__ import annotations

from gateway.commands.registry import Command, Invocation
from gateway.reminders.planner import Planner, said_back
from memory.storage.conversations import Conversations
from memory.storage.directory import Directory


class ReminderCommands:
    def __init__(
        self, planner: Planner, conversations: Conversations, directory: Directory
    ) -> None:
        self._planner = planner
        self._conversations = conversations
        self._directory = directory

    def commands(self) -> list[Command]:
        return [
            Command(
                "reminders",
                self.reminders,
                "/reminders — what I will remind you of (/reminders cancel N cancels one)",
            ),
            Command(
                "followups",
                self.follow_ups,
                "/followups off|on — whether I may check in with you on my own",
            ),
        ]

    async def reminders(self, invocation: Invocation) -> str:
        conversation_id = invocation.conversation_id
        pending = await self._planner.pending(conversation_id)
        timezone = await self._directory.timezone_of(conversation_id) or "UTC"
        words = invocation.args.split()
        if words and words[0].lower() == "cancel":
            if len(words) != 2 or not words[1].isdigit():
                return "Which one? `/reminders cancel N`, N from the list `/reminders` shows."
            number = int(words[1])
            if not 1 <= number <= len(pending):
                return f"There is no reminder {number}: `/reminders` lists {len(pending)}."
            cancelled = await self._planner.cancel(pending[number - 1].id, conversation_id)
            if cancelled is None:  # it fired or was cancelled meanwhile
                return f"Reminder {number} is no longer pending."
            return f"Cancelled: {cancelled.text}"
        if words:
            return "`/reminders` lists them; `/reminders cancel N` cancels one."
        if not pending:
            return "Nothing is pending. Ask me, e.g. “remind me tomorrow at 9 to call Ana”."
        listed = "\n".join(
            f"{n}. {said_back(schedule, timezone)}" for n, schedule in enumerate(pending, 1)
        )
        return f"Pending:\n{listed}\n\n(`/reminders cancel N` cancels one.)"

    async def follow_ups(self, invocation: Invocation) -> str:
        owner = await self._conversations.personal_owner(invocation.conversation_id)
        if owner is None:
            return "Follow-ups are personal: tell me in a direct chat."
        choice = invocation.args.strip().lower()
        if choice not in ("on", "off"):
            return "`/followups off` stops me checking in on my own; `/followups on` allows it."
        cancelled = await self._planner.set_follow_ups(
            invocation.conversation_id, owner, choice == "on"
        )
        if choice == "on":
            if not self._planner.follow_ups_allowed:
                return "Noted, but follow-ups are turned off on this gateway."
            return "Follow-ups are on: I may check in with you now and then."
        dropped = f" ({cancelled} planned ones cancelled)" if cancelled else ""
        return f"Follow-ups are off: I won't write first unless you ask me to remind you{dropped}."
