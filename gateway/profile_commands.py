"""`/profile` shows the person what is kept about them; `/forget <text>` retires lines."""

from __future__ import annotations

from gateway.clock import Clock
from gateway.commands import Commands, Invocation
from memory.profile import Profiles
from memory.store import Store


def register_profile_commands(
    commands: Commands, store: Store, profiles: Profiles, clock: Clock
) -> None:
    async def show(invocation: Invocation) -> str:
        owner = await store.personal_owner(invocation.conversation_id)
        if owner is None:
            return "Profiles are personal: ask me in a direct chat."
        profile = await profiles.get(owner)
        if not profile.lines:
            return "I have not noted anything lasting about you yet."
        return "What I keep in mind about you:\n" + profile.numbered()

    async def forget(invocation: Invocation) -> str:
        owner = await store.personal_owner(invocation.conversation_id)
        if owner is None:
            return "Profiles are personal: ask me in a direct chat."
        needle = invocation.args.strip()
        if len(needle) < 3:
            return "Tell me what to forget, e.g. `/forget dentist` (3 characters or more)."
        gone = await profiles.forget(owner, needle, clock.now())
        if not gone:
            return f"Nothing in your profile mentions “{needle}”."
        listed = "\n".join(f"- {line}" for line in gone)
        return (
            f"Forgotten ({len(gone)}):\n{listed}\n"
            "They are out of your profile; a record is kept in your retired facts."
        )

    commands.register("profile", show)
    commands.register("forget", forget)
