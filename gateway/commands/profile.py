"""`/profile` shows the person what is kept about them; `/forget <text>` retires lines."""

from __future__ import annotations

from gateway.clock import Clock
from gateway.commands.registry import Command, Invocation
from memory.profile.facts import Sources
from memory.profile.profiles import Profiles
from memory.storage.conversations import Conversations


class ProfileCommands:
    def __init__(self, conversations: Conversations, profiles: Profiles, clock: Clock) -> None:
        self._conversations = conversations
        self._profiles = profiles
        self._clock = clock

    def commands(self) -> list[Command]:
        return [
            Command(
                "profile",
                self.show,
                "/profile — what I remember about you (/profile sources: where from)",
            ),
            Command(
                "forget", self.forget, "/forget WORDS — drop the facts about you that mention them"
            ),
        ]

    async def show(self, invocation: Invocation) -> str:
        owner = await self._conversations.personal_owner(invocation.conversation_id)
        if owner is None:
            return "Profiles are personal: ask me in a direct chat."
        profile = await self._profiles.get(owner)
        if not profile.lines:
            return "I have not noted anything lasting about you yet."
        if invocation.args.strip().lower() not in ("sources", "evidence"):
            return (
                "What I keep in mind about you:\n"
                + profile.numbered()
                + "\n\n(`/profile sources` shows where each line came from.)"
            )
        return "What I keep in mind about you, and where you told me:\n" + "\n".join(
            f"{n}. {fact.text}\n   — {_where(fact.sources)}"
            for n, fact in enumerate(profile.facts, 1)
        )

    async def forget(self, invocation: Invocation) -> str:
        owner = await self._conversations.personal_owner(invocation.conversation_id)
        if owner is None:
            return "Profiles are personal: ask me in a direct chat."
        needle = invocation.args.strip()
        if len(needle) < 3:
            return "Tell me what to forget, e.g. `/forget dentist` (3 characters or more)."
        gone = await self._profiles.forget(owner, needle, self._clock.now())
        if not gone:
            return f"Nothing in your profile mentions “{needle}”."
        listed = "\n".join(f"- {line}" for line in gone)
        return (
            f"Forgotten ({len(gone)}):\n{listed}\n"
            "They are out of your profile; a record is kept in your retired facts."
        )


def _where(sources: Sources) -> str:
    if not sources:
        return "source unknown (noted before sources were kept)"
    return "; ".join(evidence.describe() for evidence in sources)
