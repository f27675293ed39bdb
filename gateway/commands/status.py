"""`/status`: the state of the person's conversation and its archive, in plain words."""

from __future__ import annotations

from gateway.clock import Clock
from gateway.commands.registry import Command, Invocation
from gateway.turns.budget import Budgets
from memory.archive.archive import Archive
from memory.archive.reads import ArchiveStatus
from memory.profile.profiles import Profiles
from memory.storage.deliveries import Deliveries
from memory.storage.lookups import Lookups
from memory.storage.messages import Messages
from memory.storage.models import ChunkStatus

LEVEL_NAMES = {0: "chunks", 1: "consolidated chunks"}
LOOKUPS_SHOWN = 3


class StatusCommand:
    def __init__(
        self,
        archive: Archive,
        deliveries: Deliveries,
        profiles: Profiles,
        lookups: Lookups,
        messages: Messages,
        budgets: Budgets | None = None,
        clock: Clock | None = None,
    ) -> None:
        """`budgets` and `clock`: to say what today's turns took against the cap."""
        self._budgets = budgets
        self._clock = clock
        self._messages = messages
        self._archive = archive
        self._deliveries = deliveries
        self._profiles = profiles
        self._lookups = lookups

    def commands(self) -> list[Command]:
        return [
            Command("status", self.status, "/status — how this conversation and its archive stand")
        ]

    async def status(self, invocation: Invocation) -> str:
        conversation = invocation.conversation_id
        lines = [describe(await self._archive.status(conversation))]
        model = await self._messages.last_model(conversation)
        if model is not None:
            lines.append(f"Last reply written by: {model}.")
        if self._budgets is not None and self._clock is not None:
            today = await self._budgets.today(conversation, self._clock.now())
            if today is not None:
                midnight = "UTC" if today.group else "your time"
                lines.append(
                    f"Tokens today: {today.spent:,} of {today.cap:,} "
                    f"(the count starts again at midnight, {midnight})."
                )
        uncertain = await self._deliveries.uncertain_parts(conversation)
        if uncertain:
            lines.append(
                f"Reply parts in doubt after a restart: {uncertain} "
                "(the gateway stopped while sending them)."
            )
        refused = await self._profiles.refused_in(conversation)
        if refused:
            lines.append(
                f"Profile facts refused: {refused} (the model offered them without a "
                "message you typed to show for them)."
            )
        latest = await self._lookups.newest(conversation, limit=LOOKUPS_SHOWN)
        if latest:
            lines.append("Last looked up in the archive:")
            lines += [f"- {lookup.tool} {_clip(lookup.arguments)}" for lookup in latest]
        return "\n".join(lines)


def describe(status: ArchiveStatus) -> str:
    lines = [f"Live conversation: about {status.live_tokens:,} tokens."]
    levels = sorted({level for level, _ in status.chunks})
    if not levels:
        lines.append("Archive: empty so far.")
    for level in levels:
        name = LEVEL_NAMES.get(level, f"level-{level} summaries")
        counts = {state: status.chunks.get((level, state), 0) for state in ChunkStatus}
        parts = [f"{counts[ChunkStatus.READY]} ready"]
        if counts[ChunkStatus.PENDING]:
            parts.append(f"{counts[ChunkStatus.PENDING]} being summarised")
        if counts[ChunkStatus.FAILED]:
            parts.append(f"{counts[ChunkStatus.FAILED]} failing (retrying)")
        lines.append(f"Archive {name}: {', '.join(parts)}.")
    lines.append(f"Background jobs waiting: {status.pending_work}.")
    if status.last_error:
        when = f" at {status.last_error_at:%Y-%m-%d %H:%M} UTC" if status.last_error_at else ""
        lines.append(f"Last archive error{when}: {status.last_error[:300]}")
    return "\n".join(lines)


def _clip(text: str, chars: int = 120) -> str:
    line = " ".join(text.split())
    return line if len(line) <= chars else line[: chars - 1] + "…"
