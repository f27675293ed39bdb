"""A Discord message, as discord.py parsed it, turned into our `Inbound` (or ignored)."""

from __future__ import annotations

import discord

from gateway.sdk import Inbound, InboundFile

CHANNEL = "discord"


def normalize(message: discord.Message, me: int, *, private: bool | None = None) -> Inbound | None:
    """The inbound message, or None for what Parley ignores: bots (itself included),
    system messages, and guild messages that do not speak to the bot. `private` says
    whether the chat is a DM where the message cannot (one read from history)."""
    if message.author.bot or message.author.id == me:
        return None
    if message.type not in (discord.MessageType.default, discord.MessageType.reply):
        return None
    if private is None:
        private = isinstance(message.channel, discord.DMChannel)
    if not private and not addressed(message, me):
        return None
    files = tuple(_file(message, attachment) for attachment in message.attachments)
    text, source = (message.clean_content.strip(), None) if files else _content(message)
    if not text and not files:
        return None
    return Inbound(
        channel=CHANNEL,
        external_user_id=str(message.author.id),
        text=text,
        platform_message_id=str(message.id),  # snowflakes are unique across Discord
        platform_ts=message.created_at,
        display_name=message.author.display_name,
        source=source,
        group_id=None if private else str(message.channel.id),
        group_title="" if private else _title(message),
        files=files,
    )


def addressed(message: discord.Message, me: int) -> bool:
    """Does a guild message speak to the bot: a mention of it, or a reply to it?"""
    if any(user.id == me for user in message.mentions):
        return True
    replied = message.reference.resolved if message.reference is not None else None
    return isinstance(replied, discord.Message) and replied.author.id == me


def file_ref(channel_id: int, message_id: int, attachment_id: int) -> str:
    """How an attachment is fetched later: by where it is, never by its URL (signed,
    and good for a day)."""
    return f"{channel_id}/{message_id}/{attachment_id}"


def _file(message: discord.Message, attachment: discord.Attachment) -> InboundFile:
    mime = attachment.content_type or ""
    kind = (
        "image"
        if mime.startswith("image/")
        else "audio"
        if mime.startswith("audio/")
        else "document"
    )
    seconds = attachment.duration  # a voice message's
    # A voice message is told as one, not by the name Discord gives every one of them.
    name = "" if attachment.is_voice_message() else attachment.filename
    return InboundFile(
        kind,
        file_ref(message.channel.id, message.id, attachment.id),
        name,
        mime,
        None if seconds is None else round(seconds),
    )


def _content(message: discord.Message) -> tuple[str, str | None]:
    """Text and source label: typed text has none; stickers get a placeholder the model
    can speak to (files are fetched)."""
    text = message.clean_content.strip()  # mentions as @names, not <@ids>
    things = [f"a sticker ({s.name})" for s in message.stickers]
    if not things:
        return text, None
    note = (
        f"(The person sent {', '.join(things)}. Parley cannot pass it on, so you cannot "
        "see it; tell them kindly if it matters.)"
    )
    return (f"{note}\n{text}" if text else note), "discord sticker"


def _title(message: discord.Message) -> str:
    channel = message.channel
    name = getattr(channel, "name", None) or ""
    guild = message.guild.name if message.guild is not None else ""
    return f"{guild} #{name}" if guild and name else name or guild
