"""Live windows kept in the process between turns, so a turn reads only what is new.

A conversation's live window is its messages with no chunk, in seq order. Kept here
with the conversation's `live_version` as it was read before them, a window is good
for as long as that version has not moved: every change to the live window other than
an append bumps it in the same transaction (`bump_live_version`: the archive's swap,
erasure, merging on /link, imports). Appends need no bump: a message is stored at
`last_seq + 1` under the conversation's row lock, so seqs commit in order and a turn
reads them as those greater than the last one kept, whichever process stored them.

A window read while such a change committed is tagged with the version from before
it, so the next turn reads it whole again: a kept window can be stale for no turn
after the one that read it. Memory is bounded: the least recently used conversations
go first, once there are more than `max_conversations` or more than `max_messages`
messages kept in all.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update

from memory.storage.messages import StoredMessage
from memory.storage.models import Conversation

MAX_CONVERSATIONS = 1_000
# A live window is some hundreds of messages (its tokens are bounded); a kept message
# costs about a kilobyte with its text: some 100 MB at most.
MAX_MESSAGES = 100_000


@dataclass(frozen=True, slots=True)
class KeptWindow:
    """A conversation's live window as read at `version`, oldest first. The views'
    delivery fields are as they were when first read: no turn reads them."""

    version: int
    messages: tuple[StoredMessage, ...]

    @property
    def last_seq(self) -> int:
        return self.messages[-1].seq if self.messages else 0


class LiveWindows:
    """The kept windows of one process's conversations, least recently used first."""

    def __init__(
        self, *, max_conversations: int = MAX_CONVERSATIONS, max_messages: int = MAX_MESSAGES
    ) -> None:
        self._max_conversations = max_conversations
        self._max_messages = max_messages
        self._kept: OrderedDict[uuid.UUID, KeptWindow] = OrderedDict()
        self._messages = 0

    def get(self, conversation_id: uuid.UUID, version: int) -> KeptWindow | None:
        """The kept window if it was read at `version`; a stale one is dropped."""
        kept = self._kept.get(conversation_id)
        if kept is None:
            return None
        if kept.version != version:
            self.forget(conversation_id)
            return None
        self._kept.move_to_end(conversation_id)
        return kept

    def keep(self, conversation_id: uuid.UUID, window: KeptWindow) -> None:
        self.forget(conversation_id)
        if len(window.messages) > self._max_messages:
            return  # would push out everything else, and still not fit
        self._kept[conversation_id] = window
        self._messages += len(window.messages)
        while len(self._kept) > self._max_conversations or self._messages > self._max_messages:
            _, oldest = self._kept.popitem(last=False)
            self._messages -= len(oldest.messages)

    def __contains__(self, conversation_id: object) -> bool:
        return conversation_id in self._kept

    def forget(self, conversation_id: uuid.UUID) -> None:
        gone = self._kept.pop(conversation_id, None)
        if gone is not None:
            self._messages -= len(gone.messages)

    @property
    def kept_messages(self) -> int:
        return self._messages

    def __len__(self) -> int:
        return len(self._kept)


def bump_live_version(conversation_ids: Iterable[uuid.UUID]) -> Any:
    """The statement that tells every process's kept windows of these conversations
    that their live window changed other than by an append: run it in the transaction
    that changes it."""
    return (
        update(Conversation)
        .where(Conversation.id.in_(list(conversation_ids)))
        .values(live_version=Conversation.live_version + 1)
        .execution_options(synchronize_session=False)
    )
