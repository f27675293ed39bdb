"""Telegram updates as Parley inbound messages (pure functions, no I/O).

Private chats feed the sender's personal conversation. In groups only messages that
mention the bot, reply to it or carry a command addressed to it are taken; each group
has its own conversation. Photos, voice notes, audio, documents and static stickers
carry their files (fetched by the connector after the message is stored; the caption is
the message's text); other media (videos, GIFs, polls, places) become labelled
placeholders; an edit becomes a labelled event that is stored but not answered. Updates
of any other kind, and service messages, are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from telegram import (
    Chat,
    Message,
    MessageEntity,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
    Update,
)
from telegram.constants import ChatType, MessageEntityType

from gateway.sdk import Inbound, InboundFile

CHANNEL = "telegram"
EDIT_SOURCE = "telegram edit of an earlier message"

# Message attribute -> how the placeholder names it, in the order Telegram documents them.
_MEDIA = (
    ("animation", "a GIF"),
    ("audio", "an audio file"),
    ("document", "a file"),
    ("photo", "a photo"),
    ("sticker", "a sticker"),
    ("video", "a video"),
    ("video_note", "a video message"),
    ("voice", "a voice message"),
    ("contact", "a contact card"),
    ("dice", "a dice roll"),
    ("poll", "a poll"),
    ("venue", "a place"),
    ("location", "a location"),
)


@dataclass(frozen=True, slots=True)
class BotUser:
    id: int
    username: str


def message_key(chat_id: int, message_id: int) -> str:
    """A message id unique per channel (Telegram's are unique per chat only)."""
    return f"{chat_id}:{message_id}"


def is_group(update: Update) -> bool:
    message = update.message or update.edited_message
    chat = None if message is None else message.chat
    return chat is not None and chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)


def chat_id(update: Update) -> int | None:
    message = update.message or update.edited_message
    return None if message is None else message.chat.id


def migration(update: Update) -> tuple[int, int] | None:
    """(old id, new id) if the update's message says a group became a supergroup: a
    service message in the old group (`migrate_to_chat_id`) and one in the new
    (`migrate_from_chat_id`) each say so."""
    message = update.message
    if message is None:
        return None
    old, new = message.migrate_from_chat_id, message.migrate_to_chat_id
    if new is not None and _integer(new) and _integer(message.chat.id):
        return message.chat.id, new
    if old is not None and _integer(old) and _integer(message.chat.id):
        return old, message.chat.id
    return None


def normalize(update: Update, me: BotUser | None) -> Inbound | None:
    """The inbound message an update carries; None for what Parley ignores."""
    message = update.message or update.edited_message
    if message is None:
        return None
    edited = update.message is None
    user = message.from_user
    # PTB takes whatever JSON it is given; ids that are not integers are no update.
    if not all(_integer(n) for n in (message.chat.id, message.message_id)):
        raise ValueError("chat.id and message_id must be integers")
    if user is not None and not _integer(user.id):
        raise ValueError("from.id must be an integer")
    # Channel posts and anonymous admins have no person behind them; Telegram never
    # shows bots each other's messages, but a forged one is ignored all the same.
    if user is None or user.is_bot or message.chat.type == ChatType.CHANNEL:
        return None
    group = message.chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)
    if group and not addressed(message, me):
        return None
    # An edit's files are the message's, fetched when it came: the edit is its text.
    files = () if edited else _files(message)
    content = (message.caption or "", None) if files else _content(message)
    if content is None:
        return None
    text, source = content
    forwarded = forwarded_from(message)
    if forwarded is not None:
        # Someone else's words: context, never the sender's own typing.
        source = forwarded if source is None else f"{forwarded} ({source})"
    key = message_key(message.chat.id, message.message_id)
    if edited:
        # Every edit is its own event; a redelivered edit carries the same edit date.
        stamp = message.edit_date.timestamp() if message.edit_date else update.update_id
        key = f"{key}:edit:{int(stamp)}"
        source = EDIT_SOURCE if source is None else f"{EDIT_SOURCE} ({source})"
    return Inbound(
        channel=CHANNEL,
        external_user_id=str(user.id),
        text=text,
        platform_message_id=key,
        platform_ts=message.date,
        # PTB gives None for a name that is empty (or was only NUL characters).
        display_name=user.full_name or "",
        source=source,
        group_id=str(message.chat.id) if group else None,
        group_title=(message.chat.title or "") if group else "",
        expects_reply=not edited,
        files=files,
    )


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is no id


def addressed(message: Message, me: BotUser | None) -> bool:
    """Does a group message speak to the bot: a mention, a reply or a command?"""
    if me is None:
        return False
    replied = message.reply_to_message
    if replied is not None and replied.from_user is not None and replied.from_user.id == me.id:
        return True
    entities = message.parse_entities() or message.parse_caption_entities()
    return any(_names_bot(entity, text, me) for entity, text in entities.items())


def _names_bot(entity: MessageEntity, text: str, me: BotUser) -> bool:
    handle = "@" + me.username.lower()
    if entity.type == MessageEntityType.MENTION:
        return text.lower() == handle
    if entity.type == MessageEntityType.TEXT_MENTION:
        return entity.user is not None and entity.user.id == me.id
    if entity.type == MessageEntityType.BOT_COMMAND:
        _, at, target = text.partition("@")
        # A bare command opening the message is for every bot in the group.
        return (not at and entity.offset == 0) or "@" + target.lower() == handle
    return False


def forwarded_from(message: Message) -> str | None:
    """The source label of a forwarded message, or None if the sender wrote it.

    `forward_origin` is the Bot API's field since 7.0; updates from older servers, or
    replayed from storage, carry `forward_from`, `forward_from_chat` or
    `forward_sender_name`, which PTB leaves in `api_kwargs`.
    """
    origin = message.forward_origin
    legacy = message.api_kwargs
    if origin is not None:
        if isinstance(origin, MessageOriginUser):
            name = origin.sender_user.full_name
        elif isinstance(origin, MessageOriginHiddenUser):
            name = origin.sender_user_name
        elif isinstance(origin, MessageOriginChat | MessageOriginChannel):
            name = _chat_name(
                origin.chat if isinstance(origin, MessageOriginChannel) else origin.sender_chat
            )
        else:
            name = ""
    elif any(key in legacy for key in _LEGACY_FORWARD):
        name = _legacy_name(legacy)
    else:
        return None
    return f"forwarded from {name or 'someone'} on Telegram"


_LEGACY_FORWARD = ("forward_from", "forward_from_chat", "forward_sender_name", "forward_date")


def _legacy_name(fields: Mapping[str, object]) -> str:
    user, chat = fields.get("forward_from"), fields.get("forward_from_chat")
    if isinstance(user, dict):
        return " ".join(str(user.get(k) or "") for k in ("first_name", "last_name")).strip()
    if isinstance(chat, dict):
        return str(chat.get("title") or "")
    name = fields.get("forward_sender_name")
    return name if isinstance(name, str) else ""


def _chat_name(chat: Chat) -> str:
    return chat.title or chat.full_name or ""


def _content(message: Message) -> tuple[str, str | None] | None:
    """Text and source label: typed text has no label, media get a placeholder."""
    if message.text:
        return message.text, None
    for attribute, what in _MEDIA:
        if getattr(message, attribute):
            caption = message.caption or ""
            note = (
                f"(The person sent {what}. Parley cannot pass it on, so you cannot see or "
                "hear it; tell them kindly if it matters.)"
            )
            text = f"{note}\n{caption}" if caption else note
            return text, f"telegram {attribute.replace('_', ' ')}"
    return None


def _files(message: Message) -> tuple[InboundFile, ...]:
    """The files a message carries that Parley reads: the largest size of a photo, a
    voice note, audio, a document, a sticker that is a still image."""
    if message.photo:
        return (InboundFile("image", message.photo[-1].file_id),)
    if message.voice:
        voice = message.voice.to_dict()  # its duration, without PTB's deprecation notice
        return (
            InboundFile(
                "audio", voice["file_id"], "", voice.get("mime_type") or "", _seconds(voice)
            ),
        )
    if message.audio:
        audio = message.audio.to_dict()
        name = audio.get("file_name") or audio.get("title") or "audio"
        return (
            InboundFile(
                "audio", audio["file_id"], name, audio.get("mime_type") or "", _seconds(audio)
            ),
        )
    if message.document:
        document = message.document
        return (
            InboundFile(
                "document", document.file_id, document.file_name or "", document.mime_type or ""
            ),
        )
    sticker = message.sticker
    if sticker and not sticker.is_animated and not sticker.is_video:
        return (InboundFile("image", sticker.file_id, "sticker.webp", "image/webp"),)
    return ()


def _seconds(fields: Mapping[str, object]) -> int | None:
    duration = fields.get("duration")
    if isinstance(duration, timedelta):  # PTB's time periods, where opted in
        duration = int(duration.total_seconds())
    return duration if isinstance(duration, int) and duration >= 0 else None
