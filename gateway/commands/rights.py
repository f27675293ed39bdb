"""`/export` and `/erase`: a person's own copy of everything kept of them, and the
erasure of all of it, from any chat.

`/export` answers with a link that works once, for a day. `/erase` answers with a
code; `/erase CODE` within ten minutes erases the person, and the confirmation goes
out as a notice: the conversation it would be stored in is gone.
"""

from __future__ import annotations

from datetime import timedelta

from gateway.channels.outbox import Outbox
from gateway.clock import Clock
from gateway.commands.registry import Command, Invocation
from gateway.errors import Busy, PersonNotFound
from gateway.operations.erasing import Erasing
from memory.storage.conversations import Conversations
from memory.storage.rights import Rights

EXPORT_TTL = timedelta(hours=24)
ERASE_TTL = timedelta(minutes=10)
# Where export links point; the route that serves them (`gateway.http.exports`) reads it.
EXPORT_PATH = "/exports/"
# Web chat pages are served by the gateway itself: a link relative to it works there.
RELATIVE_LINKS = frozenset({"webchat"})

GROUP_ANSWER = "Please send /{name} in a private chat with me, not in a group."
NO_ADDRESS_ANSWER = (
    "I can't make a download link here: the gateway has no public address "
    "(its operator sets PARLEY_PUBLIC_URL). Ask them for your export."
)
ERASED_NOTICE = (
    "Done: everything I kept of you is erased — messages on every channel, the archive "
    "and your profile. If you write again, we start from nothing."
)
# Another conversation of theirs is in a turn that would not end in time (rare: a
# person has one conversation of their own, unless one is being linked).
BUSY_ANSWER = "I couldn't erase everything just now. Please send /erase again in a minute."


class RightsCommands:
    def __init__(
        self,
        *,
        rights: Rights,
        conversations: Conversations,
        erasing: Erasing,
        outbox: Outbox,
        clock: Clock,
        public_url: str | None,
    ) -> None:
        self._rights = rights
        self._conversations = conversations
        self._erasing = erasing
        self._outbox = outbox
        self._clock = clock
        self._public_url = None if public_url is None else public_url.rstrip("/")

    def commands(self) -> list[Command]:
        return [
            Command("export", self.export, "/export — a one-time link to everything I keep of you"),
            Command("erase", self.erase, "/erase — erase everything I keep of you"),
        ]

    async def export(self, invocation: Invocation) -> str:
        owner = await self._conversations.personal_owner(invocation.conversation_id)
        if owner is None:
            return GROUP_ANSWER.format(name="export")
        if self._public_url is None and invocation.message.channel not in RELATIVE_LINKS:
            return NO_ADDRESS_ANSWER
        token = await self._rights.issue_export_link(owner, now=self._clock.now(), ttl=EXPORT_TTL)
        link = f"{self._public_url or ''}{EXPORT_PATH}{token}"
        return (
            f"Here is everything I keep of you, as one file: {link}\n"
            "The link works once, for the next 24 hours."
        )

    async def erase(self, invocation: Invocation) -> str:
        owner = await self._conversations.personal_owner(invocation.conversation_id)
        if owner is None:
            return GROUP_ANSWER.format(name="erase")
        now = self._clock.now()
        if not invocation.args:
            code = await self._rights.issue_erasure_code(owner, now=now, ttl=ERASE_TTL)
            return (
                "This erases everything I keep of you — every message on every channel, "
                "the archive and your profile — for good; it cannot be undone. "
                f"To go ahead, send /erase {code} within 10 minutes."
            )
        if not await self._rights.confirms_erasure(owner, invocation.args, now=now):
            return "That code is wrong or has expired. Send /erase for a new one."
        # Where to say it is done, read before the identity it names is gone.
        chat = await self._outbox.chat_of(invocation.message)
        try:
            await self._erasing.erase_person(
                owner, notice=ERASED_NOTICE, asking=invocation.conversation_id
            )
        except Busy:
            return BUSY_ANSWER
        except PersonNotFound:
            pass  # erased meanwhile (an operator): gone all the same, as they asked
        await self._outbox.notify(chat, ERASED_NOTICE)
        # Nowhere to store this answer: the turn sees its message gone and stops.
        return ERASED_NOTICE
