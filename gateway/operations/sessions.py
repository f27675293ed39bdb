"""Conversations as an operator reads them: found, looked into, renamed, their
messages read both ways and searched, their archive timeline and the lookups the
assistant made in it. Each one named that is not there is `ConversationNotFound`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gateway.errors import ConversationNotFound, InputError, NotFound
from gateway.reminders.planner import Planner
from memory.archive.archive import Archive
from memory.archive.reads import ArchiveStatus, ChunkView
from memory.storage.attachments import Attachments, AttachmentView
from memory.storage.conversations import Conversations, ConversationView
from memory.storage.directory import After, Directory, PersonView, SessionFilter
from memory.storage.lookups import Lookups, LookupView
from memory.storage.messages import Messages, StoredMessage
from memory.storage.search import Search, SearchHit, SearchPosition


@dataclass(frozen=True, slots=True)
class SessionState:
    """One conversation with its person (None for a group) and its archive."""

    conversation: ConversationView
    person: PersonView | None
    archive: ArchiveStatus


class Sessions:
    def __init__(
        self,
        *,
        conversations: Conversations,
        directory: Directory,
        messages: Messages,
        search: Search,
        lookups: Lookups,
        archive: Archive,
        planner: Planner,
        attachments: Attachments,
    ) -> None:
        self._planner = planner
        self._attachments = attachments
        self._conversations = conversations
        self._directory = directory
        self._messages = messages
        self._search = search
        self._lookups = lookups
        self._archive = archive

    async def require(self, conversation_id: uuid.UUID) -> ConversationView:
        view = await self._conversations.get_conversation(conversation_id)
        if view is None:
            raise ConversationNotFound()
        return view

    async def page(
        self, where: SessionFilter, *, after: After | None, limit: int
    ) -> list[ConversationView]:
        """Conversations, newest first."""
        return await self._directory.conversations(where, after=after, limit=limit)

    async def state(self, conversation_id: uuid.UUID) -> SessionState:
        view = await self.require(conversation_id)
        person = None if view.user_id is None else await self._directory.person(view.user_id)
        return SessionState(view, person, await self._archive.status(conversation_id))

    async def rename(
        self, conversation_id: uuid.UUID, *, title: str | None, timezone: str | None
    ) -> None:
        """Set the title and the person's time zone; a group has none to set
        (`InputError`)."""
        if timezone is not None and await self._directory.timezone_of(conversation_id) is None:
            await self.require(conversation_id)
            raise InputError("a group conversation has no time zone of its own")
        if not await self._directory.rename(conversation_id, title=title, timezone=timezone):
            raise ConversationNotFound()
        owner = await self._conversations.personal_owner(conversation_id)
        if timezone is not None and owner is not None:
            await self._planner.rezone(owner, timezone)

    async def messages_after(
        self, conversation_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[StoredMessage]:
        """Oldest first."""
        await self.require(conversation_id)
        return await self._messages.messages_after(conversation_id, after_seq, limit)

    async def attachments_of(
        self, messages: Sequence[StoredMessage]
    ) -> dict[int, list[AttachmentView]]:
        """The files of the messages that have any, by message id."""
        return await self._attachments.of_messages([m.id for m in messages if m.media])

    async def attachment(self, attachment_id: int) -> tuple[AttachmentView, bytes]:
        """A file someone sent, with its bytes; `NotFound` if there is none."""
        found = await self._attachments.content(attachment_id)
        if found is None:
            raise NotFound("attachment")
        return found

    async def messages_before(
        self, conversation_id: uuid.UUID, before_seq: int, limit: int
    ) -> list[StoredMessage]:
        """The `limit` just before `before_seq`, oldest first."""
        await self.require(conversation_id)
        return await self._messages.messages_before(conversation_id, before_seq, limit)

    async def search(
        self,
        conversation_id: uuid.UUID,
        query: str,
        *,
        limit: int,
        start: datetime | None,
        end: datetime | None,
        after: SearchPosition | None,
    ) -> list[SearchHit]:
        """Every word of `query` in a message or an archived transcript, newest first."""
        await self.require(conversation_id)
        return await self._search.search(
            conversation_id, query, limit=limit, start=start, end=end, after=after
        )

    async def timeline(self, conversation_id: uuid.UUID) -> list[ChunkView]:
        """The archive rows the prompt shows now, oldest first."""
        await self.require(conversation_id)
        return await self._archive.timeline(conversation_id)

    async def lookups(
        self, conversation_id: uuid.UUID, *, before_id: int | None, limit: int
    ) -> list[LookupView]:
        """What the assistant looked up with its recall tools, newest first."""
        await self.require(conversation_id)
        return await self._lookups.newest(conversation_id, before_id=before_id, limit=limit)
