"""WhatsApp webhook notifications as Parley inbound messages and delivery receipts.

Pure functions. The payload is read leniently: anything that is not the documented
shape is skipped (the platform gets its 200 and stops retrying), never a 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.sdk import Delivery, Inbound, InboundFile

CHANNEL = "whatsapp"
OBJECT = "whatsapp_business_account"

_STATUSES = {
    "sent": Delivery.SENT,
    "delivered": Delivery.DELIVERED,
    "read": Delivery.READ,
    "failed": Delivery.FAILED,
}
# Message type -> how the placeholder names it.
_MEDIA = {
    "image": "a photo",
    "video": "a video",
    "audio": "an audio or voice message",
    "voice": "a voice message",
    "document": "a file",
    "sticker": "a sticker",
    "location": "a location",
    "contacts": "a contact card",
    "order": "an order",
}
_CAPTIONED = ("image", "video", "document")
# Message type -> the kind of file Parley keeps of it (the rest are placeholders).
_FILES = {
    "image": "image",
    "audio": "audio",
    "voice": "audio",
    "document": "document",
    "sticker": "image",
}


@dataclass(frozen=True, slots=True)
class Receipt:
    platform_id: str
    status: Delivery
    error: str | None


@dataclass(frozen=True, slots=True)
class Notification:
    messages: list[Inbound]
    receipts: list[Receipt]


def parse(payload: dict[str, Any], phone_number_id: str) -> Notification:
    """Messages (oldest first) and receipts for our number; the rest is ignored."""
    messages: list[Inbound] = []
    receipts: list[Receipt] = []
    if payload.get("object") != OBJECT:
        return Notification(messages, receipts)
    for value in _values(payload, phone_number_id):
        names = _contact_names(value)
        for raw in _dicts(value.get("messages")):
            inbound = _message(raw, names)
            if inbound is not None:
                messages.append(inbound)
        for raw in _dicts(value.get("statuses")):
            receipt = _receipt(raw)
            if receipt is not None:
                receipts.append(receipt)
    # One notification may batch several messages; their order is the person's.
    messages.sort(key=lambda m: m.platform_ts or datetime.min.replace(tzinfo=UTC))
    return Notification(messages, receipts)


def _dicts(value: object) -> Iterator[dict[str, Any]]:
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, dict))


def _values(payload: dict[str, Any], phone_number_id: str) -> Iterator[dict[str, Any]]:
    for entry in _dicts(payload.get("entry")):
        for change in _dicts(entry.get("changes")):
            value = change.get("value")
            if change.get("field") != "messages" or not isinstance(value, dict):
                continue
            metadata = value.get("metadata")
            # An app can serve several numbers; only ours is ours to answer.
            if isinstance(metadata, dict) and metadata.get("phone_number_id") == phone_number_id:
                yield value


def _contact_names(value: dict[str, Any]) -> dict[str, str]:
    names = {}
    for contact in _dicts(value.get("contacts")):
        profile = contact.get("profile")
        name = profile.get("name") if isinstance(profile, dict) else None
        if isinstance(contact.get("wa_id"), str) and isinstance(name, str):
            names[contact["wa_id"]] = name
    return names


def _message(raw: dict[str, Any], names: dict[str, str]) -> Inbound | None:
    sender, wamid, kind = raw.get("from"), raw.get("id"), raw.get("type")
    if not (isinstance(sender, str) and sender and isinstance(wamid, str) and wamid):
        return None
    if not isinstance(kind, str) or kind == "system":
        return None  # number changes and the like concern no conversation
    body = raw.get(kind)
    file = _file(kind, body) if isinstance(body, dict) else None
    content: tuple[str, str | None, bool] | None
    if file is not None:
        caption = body.get("caption") if isinstance(body, dict) and kind in _CAPTIONED else None
        content = (caption if isinstance(caption, str) else "", None, True)
    else:
        content = _content(kind, raw)
    if content is None:
        return None
    text, source, expects_reply = content
    if _forwarded(raw):
        # Someone else's words: context, never the sender's own typing.
        label = "forwarded from someone on WhatsApp"
        source = label if source is None else f"{label} ({source})"
    return Inbound(
        channel=CHANNEL,
        external_user_id=sender,
        text=text,
        platform_message_id=wamid,
        platform_ts=_time(raw.get("timestamp")),
        display_name=names.get(sender, ""),
        source=source,
        expects_reply=expects_reply,
        files=() if file is None else (file,),
    )


def _forwarded(raw: dict[str, Any]) -> bool:
    # WhatsApp says only that a message was forwarded (often, or at all), not by whom.
    context = raw.get("context")
    return isinstance(context, dict) and bool(
        context.get("forwarded") or context.get("frequently_forwarded")
    )


def _content(kind: str, raw: dict[str, Any]) -> tuple[str, str | None, bool] | None:
    """Text, source label and whether it asks for an answer."""
    body = raw.get(kind)
    body = body if isinstance(body, dict) else {}
    if kind == "text":
        text = body.get("body")
        return (text, None, True) if isinstance(text, str) and text else None
    if kind in ("button", "interactive"):
        choice = _choice(kind, body)
        return (choice, f"whatsapp {kind} reply", True) if choice else None
    if kind == "reaction":
        emoji = body.get("emoji")
        text = f"(reacted {emoji} to an earlier message)" if emoji else "(removed a reaction)"
        return text, "whatsapp reaction", False
    what = _MEDIA.get(kind, "a kind of message Parley does not support")
    note = (
        f"(The person sent {what}. Parley cannot pass it on, so you cannot see or hear "
        "it; tell them kindly if it matters.)"
    )
    caption = body.get("caption") if kind in _CAPTIONED else None
    text = f"{note}\n{caption}" if isinstance(caption, str) and caption else note
    return text, f"whatsapp {kind}", True


def _file(kind: str, body: dict[str, Any]) -> InboundFile | None:
    """The file of a message Parley reads (a photo, a voice note or audio, a document,
    a sticker), by its media id."""
    media_id, mime = body.get("id"), body.get("mime_type")
    if kind not in _FILES or not isinstance(media_id, str) or not media_id:
        return None
    mime = mime if isinstance(mime, str) else ""
    if kind == "sticker" and body.get("animated") is True:
        return None  # moving: told as a placeholder, like a video
    name = body.get("filename") if kind == "document" else None
    return InboundFile(_FILES[kind], media_id, name if isinstance(name, str) else "", mime)


def _choice(kind: str, body: dict[str, Any]) -> str | None:
    """The title of the button or list row the person tapped."""
    if kind == "button":
        text = body.get("text")
        return text if isinstance(text, str) else None
    for key in ("button_reply", "list_reply"):
        reply = body.get(key)
        if isinstance(reply, dict) and isinstance(reply.get("title"), str):
            title: str = reply["title"]
            return title
    return None


def _time(value: object) -> datetime | None:
    if isinstance(value, str) and value.isdigit():
        try:
            return datetime.fromtimestamp(int(value), UTC)
        except (OverflowError, ValueError, OSError):
            return None
    return None


def _receipt(raw: dict[str, Any]) -> Receipt | None:
    wamid, status = raw.get("id"), _STATUSES.get(str(raw.get("status")))
    if not isinstance(wamid, str) or status is None:
        return None
    return Receipt(wamid, status, _error(raw.get("errors")) if status is Delivery.FAILED else None)


def _error(errors: object) -> str:
    for error in _dicts(errors):
        data = error.get("error_data")
        details = data.get("details") if isinstance(data, dict) else None
        title = error.get("title") or error.get("message") or "failed"
        return f"WhatsApp error {error.get('code', '?')}: {details or title}"
    return "WhatsApp reported the message as failed"
