"""`/link` and `/unlink`: one person, one conversation, on every channel.

`/link` answers with a one-time code valid for ten minutes; `/link CODE` sent from
another channel attaches that channel's identity to the code issuer's person and merges
the two conversations into one (see `Links.redeem_link_code`). `/unlink` gives the
current channel a conversation of its own again.

Both run in the turn order of the conversation they were typed in. A merge also
rewrites the issuer's conversation, so its turns are held meanwhile (`Linking.held`).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from gateway.clock import Clock
from gateway.commands.registry import Command, Invocation
from gateway.operations.linking import Linking
from memory.storage.conversations import Conversations
from memory.storage.identities import Identities, UnlinkStatus
from memory.storage.linking import Links, LinkStatus

CODE_TTL = timedelta(minutes=10)

BUSY_ANSWER = "I'm busy with your other chat right now; please send that again in a minute."
GROUP_ANSWER = "Please send /link in a private chat with me, not in a group."
_CHECK_ANSWERS = {
    LinkStatus.UNKNOWN: (
        "I don't know that code. Check it, or send /link in your other chat for a new one."
    ),
    LinkStatus.EXPIRED: (
        "That code has expired (codes last 10 minutes). Send /link in your other chat "
        "for a new one."
    ),
    LinkStatus.USED: (
        "That code has already been used. Send /link in your other chat for a new one."
    ),
    LinkStatus.ALREADY_LINKED: "This chat is already part of that conversation.",
}


def issued_answer(code: str) -> str:
    return (
        f"Your link code is {code}. Within 10 minutes, send\n/link {code}\n"
        "from your other chat (Telegram, WhatsApp, Discord or web chat), and the two "
        "become one conversation."
    )


def linked_answer(channel: str) -> str:
    where = f"your {channel} chat" if channel else "your other chat"
    return (
        f"Linked: this chat and {where} are now one conversation, and I remember "
        "what you said in both."
    )


class LinkCommands:
    def __init__(
        self,
        *,
        linking: Linking,
        links: Links,
        identities: Identities,
        conversations: Conversations,
        clock: Clock,
    ) -> None:
        self._linking = linking
        self._links = links
        self._identities = identities
        self._conversations = conversations
        self._clock = clock

    def commands(self) -> list[Command]:
        return [
            Command(
                "link",
                self.link,
                "/link — a code to join this chat with your other ones (/link CODE to use one)",
            ),
            Command(
                "unlink", self.unlink, "/unlink — give this chat a conversation of its own again"
            ),
        ]

    async def link(self, invocation: Invocation) -> str:
        identity_id = invocation.message.identity_id
        if identity_id is None or await self._conversations.group_of(invocation.conversation_id):
            return GROUP_ANSWER
        now = self._clock.now()
        if not invocation.args:
            code = await self._links.issue_link_code(identity_id, now=now, ttl=CODE_TTL)
            return issued_answer(code)
        check = await self._links.check_link_code(invocation.args, identity_id, now=now)
        if check.status is not LinkStatus.READY or check.survivor is None:
            return _CHECK_ANSWERS.get(check.status, _CHECK_ANSWERS[LinkStatus.UNKNOWN])
        async with contextlib.AsyncExitStack() as held:
            try:
                await held.enter_async_context(self._linking.held([check.survivor]))
            except TimeoutError:
                return BUSY_ANSWER
            result = await self._links.redeem_link_code(
                invocation.args,
                identity_id,
                now=self._clock.now(),
                answering_message_id=invocation.message.id,
            )
        if result.status is LinkStatus.LINKED:
            return linked_answer(result.issuer_channel)
        return _CHECK_ANSWERS.get(result.status, _CHECK_ANSWERS[LinkStatus.UNKNOWN])

    async def unlink(self, invocation: Invocation) -> str:
        identity_id = invocation.message.identity_id
        if identity_id is None or await self._conversations.group_of(invocation.conversation_id):
            return "Please send /unlink in a private chat with me, not in a group."
        status = await self._identities.unlink(identity_id, now=self._clock.now())
        if status is UnlinkStatus.ONLY_IDENTITY:
            return "This chat isn't linked to any other, so there is nothing to unlink."
        return (
            f"Unlinked: this {invocation.message.channel} chat starts a conversation of its "
            "own from now on. What you said before stays with your other chats."
        )
