"""Platform-neutral messages crossing the boundary between connectors and the core."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class InboundFile:
    """A file a platform holds for a message: fetched by its connector after the message
    is stored, never while the platform waits for its acknowledgement."""

    kind: str  # image | audio | document
    ref: str  # the platform's id of the file, which its connector fetches it by
    file_name: str = ""
    mime: str = ""  # as the platform says (the bytes decide)
    duration: int | None = None  # seconds, for a voice note or audio


@dataclass(frozen=True, slots=True)
class Inbound:
    """A message a connector received and verified, normalised."""

    channel: str
    external_user_id: str
    text: str
    # Unique per channel; a redelivery carries the same id and is stored once.
    platform_message_id: str | None = None
    platform_ts: datetime | None = None
    display_name: str = ""
    # Set by the connector for input the person did not type (an edit, a placeholder
    # for a photo); never taken from the platform payload's own text.
    source: str | None = None
    # A group chat's platform id: the message joins that group's own conversation.
    group_id: str | None = None
    group_title: str = ""
    # False for input that informs but asks nothing (an edit): stored, not answered.
    expects_reply: bool = True
    # Files the sender uploaded for this message (web chat), by the ids the upload gave.
    attachment_ids: tuple[int, ...] = ()
    # Files the platform holds for it (Telegram, WhatsApp, Discord).
    files: tuple[InboundFile, ...] = ()


@dataclass(frozen=True, slots=True)
class ChatRef:
    """A chat on a platform: a person's private chat, or a group."""

    channel: str
    external_user_id: str
    group_id: str | None = None
    # The message being answered (read receipts, typing indicators tied to it).
    platform_message_id: str | None = None


@dataclass(frozen=True, slots=True)
class Outbound:
    """A reply for a connector to deliver."""

    message_id: int
    channel: str
    external_user_id: str
    text: str
    reply_to_platform_id: str | None = None
    # Where it goes when the conversation is a group (else the person's private chat).
    group_id: str | None = None
    # A long reply goes out as numbered parts, in order; `text` is this part's.
    part: int = 0
    parts: int = 1
    # When the message it answers was sent (WhatsApp allows free text for 24 hours).
    reply_to_sent_at: datetime | None = None
    # It writes a reminder coming due (DESIGN §9): where the platform refuses free text
    # (WhatsApp outside its window), the connector's reminder template may carry it.
    reminder: bool = False
    # The platform id of a message that showed the reply while it was written (DESIGN
    # §10): this part is edited into it rather than sent as a new message.
    replaces: str | None = None

    @property
    def chat(self) -> ChatRef:
        return ChatRef(
            self.channel, self.external_user_id, self.group_id, self.reply_to_platform_id
        )
