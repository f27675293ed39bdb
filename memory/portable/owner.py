"""Whose an import is: a new person, or the one person here the file shows it belongs to.

An identity is (channel, external_id), which anyone may write into a file; it is no
proof. What shows that a file is the history of a person here is the first message of
their conversation (its seq and time, to the microsecond), which only their history
and its exports hold. So an import goes to a person here only if:

- every identity of the file that exists here is that one person's (a file naming
  identities of two people here is refused), and
- that person's conversation begins with the file's `first_message`.

Without both, nothing is imported: neither the file's identities (a stranger's would be
joined to the person, and get their memory in every prompt) nor its messages and
profile lines. A file none of whose identities exist here makes a new person.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from memory.portable import rows
from memory.portable.format import AuthorKey
from memory.storage.models import Conversation, Message

# What the refusals suggest: the person's own data is safe to keep before erasing.
_ERASE_FIRST = "To import the file as theirs, erase that person first (export them to keep it)."


class ImportConflict(Exception):
    """The file is not shown to be the history of the person here it names: nothing
    was imported."""


async def owner(
    session: AsyncSession,
    found: Mapping[AuthorKey, uuid.UUID],
    conversation: rows.ConversationRow | None,
) -> uuid.UUID | None:
    """The person here the import goes to (None: a new one), given the owners here of
    the file's identities (`found`); `ImportConflict` if the file does not show it is
    theirs."""
    people: dict[uuid.UUID, list[AuthorKey]] = {}
    for key, user_id in found.items():
        people.setdefault(user_id, []).append(key)
    if len(people) > 1:
        whose = "; ".join(f"{_named(keys)}: person {user_id}" for user_id, keys in people.items())
        raise ImportConflict(
            f"the file's identities belong to two different people here ({whose}); an "
            "import goes to one person. Take out of the file the identities that are not "
            "its person's, or merge the two people first."
        )
    if not people:
        return None
    ((user_id, keys),) = people.items()
    await _same_history(session, user_id, _named(keys), conversation)
    return user_id


def ensure_theirs(
    keys: Sequence[AuthorKey], found: Mapping[AuthorKey, uuid.UUID], user_id: uuid.UUID
) -> None:
    """`ImportConflict` if an identity of the file is someone else's after all (their
    first message came between the check and the insert)."""
    others = [key for key in keys if found.get(key, user_id) != user_id]
    if others:
        raise ImportConflict(
            f"{_named(others)} became someone else's during the import; nothing was imported"
        )


async def _same_history(
    session: AsyncSession,
    user_id: uuid.UUID,
    named: str,
    conversation: rows.ConversationRow | None,
) -> None:
    here = (
        await session.execute(
            select(Message.seq, Message.created_at)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(Conversation.user_id == user_id)
            .order_by(Message.seq)
            .limit(1)
        )
    ).one_or_none()
    claim = f"{named} belongs to the person {user_id} here"
    if here is None:
        raise ImportConflict(
            f"{claim}, who has no history the file could show is theirs; nothing was "
            f"imported. {_ERASE_FIRST}"
        )
    first = None if conversation is None else conversation.first
    if first is None:
        raise ImportConflict(
            f"{claim}, but the file names no first message of a conversation, so nothing "
            f"shows it is their history; nothing was imported. {_ERASE_FIRST}"
        )
    if tuple(here) != first:
        raise ImportConflict(
            f"{claim}, who has another conversation (its first message is seq "
            f"{here[0]} of {here[1]:%Y-%m-%d %H:%M}); importing would mix two histories. "
            f"{_ERASE_FIRST}"
        )


def _named(keys: Sequence[AuthorKey]) -> str:
    return ", ".join(f"{channel} {external_id}" for channel, external_id in keys)
