"""Repository for attachments: files sent with messages, their bytes included.

A web chat upload comes before its message: it belongs to the identity that uploaded
it until a message of theirs takes it (`take_uploads`, in that message's transaction),
so nobody else can attach it, and once taken no other message can.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import defer

from memory.escaping import escape_typed, header_value
from memory.storage.models import (
    Attachment,
    AttachmentKind,
    AttachmentState,
    Conversation,
    Message,
)


class UploadNotFound(LookupError):
    """An attachment id that is no unattached upload of the sender's."""


@dataclass(frozen=True, slots=True)
class NewAttachment:
    kind: AttachmentKind
    mime: str
    data: bytes
    file_name: str = ""
    width: int | None = None
    height: int | None = None
    state: AttachmentState = AttachmentState.READY


@dataclass(frozen=True, slots=True)
class AttachmentView:
    id: int
    message_id: int | None
    kind: AttachmentKind
    state: AttachmentState
    mime: str
    size: int
    file_name: str
    width: int | None
    height: int | None
    text: str | None
    duration: int | None = None


@dataclass(frozen=True, slots=True)
class PlatformFile:
    """A file a platform holds for a message, to be fetched after the message is stored."""

    kind: AttachmentKind
    source_ref: str  # the platform's id of it (never a URL)
    file_name: str = ""
    mime: str = ""  # as the platform says: a hint, until the bytes are read
    duration: int | None = None  # seconds


@dataclass(frozen=True, slots=True)
class FileToFetch:
    id: int
    channel: str
    kind: AttachmentKind
    source_ref: str
    file_name: str
    mime: str


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a fetch came to: the file as kept, or the state that says why it is not."""

    state: AttachmentState
    kind: AttachmentKind | None = None  # what the bytes are, where the platform was wrong
    mime: str = ""
    data: bytes = b""
    width: int | None = None
    height: int | None = None
    text: str | None = None  # a transcript
    sha256: str | None = None  # of `data`, where the caller hashed it off the event loop


@dataclass(frozen=True, slots=True)
class StoredImage:
    """An image ready to be shown to a model, bytes and all."""

    id: int
    message_id: int
    mime: str
    width: int
    height: int
    data: bytes
    described: bool


@dataclass(frozen=True, slots=True)
class ImageToDescribe:
    conversation_id: uuid.UUID
    image: StoredImage


# An `AttachmentView`'s fields, as columns (never the bytes).
_VIEW_COLUMNS = (
    Attachment.id,
    Attachment.message_id,
    Attachment.kind,
    Attachment.state,
    Attachment.mime,
    Attachment.size,
    Attachment.file_name,
    Attachment.width,
    Attachment.height,
    Attachment.text,
    Attachment.duration,
)

# Ends the line of a file still being fetched: a turn waits while one says it.
FETCHING_MARK = ", still being fetched]"
# A document's text keeps its pages apart with this (a PDF's own pages); a text file's
# pages are pieces of `TEXT_PAGE_CHARS`.
PAGE_BREAK = "\f"
TEXT_PAGE_CHARS = 4000
# What a prompt shows of a document: its start; the model reads on with a tool.
DOCUMENT_START_CHARS = 1500


def pages(text: str) -> list[str]:
    """A document's text as its pages."""
    if PAGE_BREAK in text:
        return text.split(PAGE_BREAK)
    return [text[i : i + TEXT_PAGE_CHARS] for i in range(0, len(text), TEXT_PAGE_CHARS)] or [""]


def media_line(view: AttachmentView) -> str:
    """How a model is told of a file where it is not shown it (DESIGN §11). Every word
    in it that the gateway did not write (a file's name, a description, a transcript, a
    document's) is escaped as typed text is, so none passes for one of its lines."""
    what = _what(view)
    match view.state:
        case AttachmentState.FETCHING:
            return f"[{what}{FETCHING_MARK}"
        case AttachmentState.TOO_LARGE:
            return f"[{what}, too large to read]"
        case AttachmentState.UNSUPPORTED:
            return f"[{what}, a kind of file Parley cannot read]"
        case AttachmentState.FAILED:
            return f"[{what}, could not be fetched or read]"
    if view.text and view.kind is AttachmentKind.AUDIO:
        # The person's own words, said rather than typed.
        return f"[source: {what}, transcribed]\n{escape_typed(view.text)}"
    if view.text and view.kind is AttachmentKind.DOCUMENT:
        return _document_line(view, what, view.text)
    if view.text:
        return f"[{view.kind.value}: {header_value(view.text)}]"
    if view.kind is AttachmentKind.IMAGE:
        return f"[image {view.width}×{view.height}, not described]"
    if view.kind is AttachmentKind.AUDIO:
        return f"[{what}, not transcribed]"
    return f"[{what}, {view.size:,} bytes, not read]"


def _document_line(view: AttachmentView, what: str, text: str) -> str:
    """A document's start, behind its source line (its words are the file's, not the
    person's); where there is more, how to read on."""
    paged = pages(text)
    count = f"{len(paged)} page{'s' * (len(paged) != 1)}"
    start = text.replace(PAGE_BREAK, "\n\n").strip()
    shown = escape_typed(start[:DOCUMENT_START_CHARS])
    line = f"[source: {what} (attachment {view.id}), {count}]\n{shown}"
    if len(start) > DOCUMENT_START_CHARS:
        line += f"\n[… more: attachment_read with attachment_id {view.id} and a page number]"
    return line


def _what(view: AttachmentView) -> str:
    """The file, named in one of the gateway's lines."""
    name = header_value(view.file_name)
    if view.kind is AttachmentKind.AUDIO:
        length = "" if view.duration is None else f", {view.duration // 60}:{view.duration % 60:02}"
        return f"{'audio ' + name if name else 'voice note'}{length}"
    if view.kind is AttachmentKind.IMAGE:
        return "image"
    return f"file {name or header_value(view.mime) or 'without a name'}"


def fetching(media: str | None) -> bool:
    """Whether a message's files line says one is still being fetched."""
    return media is not None and FETCHING_MARK in media


def add_platform_files(
    connection: Connection, message_id: int, files: Sequence[PlatformFile], now: datetime
) -> str:
    """The files a platform holds for a message, kept as fetching in `connection`'s
    transaction; the message's files line for them."""
    rows = [
        {
            "message_id": message_id,
            "kind": file.kind,
            "state": AttachmentState.FETCHING,
            "mime": file.mime[:100],
            "size": 0,
            "sha256": "",
            "file_name": file.file_name[:255],
            "duration": file.duration,
            "source_ref": file.source_ref[:512],
            "data": b"",
            "created_at": now,
        }
        for file in files
    ]
    added = connection.execute(
        insert(Attachment).returning(*_VIEW_COLUMNS, sort_by_parameter_order=True), rows
    )
    return "\n".join(media_line(AttachmentView(**row._asdict())) for row in added)


async def _retell(session: AsyncSession, message_id: int) -> None:
    """Write the message's files line again from its files, and tell every process's
    kept windows that the live window changed other than by an append (as
    `live_window.bump_live_version` does; it cannot be imported here)."""
    views = await session.execute(
        select(*_VIEW_COLUMNS).where(Attachment.message_id == message_id).order_by(Attachment.id)
    )
    media = "\n".join(media_line(AttachmentView(**row._asdict())) for row in views)
    conversation_id = await session.scalar(
        update(Message)
        .where(Message.id == message_id)
        .values(media=media)
        .returning(Message.conversation_id)
    )
    await session.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id)
        .values(live_version=Conversation.live_version + 1)
    )


def take_uploads(
    connection: Connection, identity_id: uuid.UUID | None, message_id: int, ids: Sequence[int]
) -> list[AttachmentView]:
    """Make the uploads `ids` the message's, in `connection`'s transaction, in the order
    given; `UploadNotFound` (roll back) unless every one is an unattached upload of
    `identity_id`'s."""
    wanted = list(dict.fromkeys(ids))
    taken = connection.execute(
        update(Attachment)
        .where(
            Attachment.id.in_(wanted),
            Attachment.identity_id == identity_id,
            Attachment.message_id.is_(None),
        )
        .values(message_id=message_id)
        .returning(*_VIEW_COLUMNS)
    )
    by_id = {row.id: AttachmentView(**row._asdict()) for row in taken}
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise UploadNotFound(f"no such upload: {missing[0]}")
    return [by_id[i] for i in wanted]


class Attachments:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def upload(
        self, identity_id: uuid.UUID, new: NewAttachment, now: datetime
    ) -> AttachmentView:
        """Keep a file an identity uploaded, for a message of theirs to take."""
        row = Attachment(
            identity_id=identity_id,
            kind=new.kind,
            state=new.state,
            mime=new.mime,
            size=len(new.data),
            sha256=hashlib.sha256(new.data).hexdigest(),
            file_name=new.file_name,
            width=new.width,
            height=new.height,
            data=new.data,
            created_at=now,
        )
        async with self._sessions() as session:
            session.add(row)
            await session.commit()
            return _view(row)

    async def of_messages(self, message_ids: Sequence[int]) -> dict[int, list[AttachmentView]]:
        """The attachments of each message that has any, oldest first."""
        if not message_ids:
            return {}
        async with self._sessions() as session:
            rows = await session.scalars(
                select(Attachment)
                .where(Attachment.message_id.in_(message_ids))
                .order_by(Attachment.id)
                .options(defer(Attachment.data))  # the views, never the bytes
            )
            found: dict[int, list[AttachmentView]] = {}
            for row in rows:
                found.setdefault(int(row.message_id or 0), []).append(_view(row))
        return found

    async def images_of(self, message_ids: Sequence[int], limit: int) -> list[StoredImage]:
        """The newest `limit` images ready among the messages', newest first."""
        if not message_ids or limit <= 0:
            return []
        async with self._sessions() as session:
            rows = await session.execute(
                select(*_IMAGE_COLUMNS)
                .where(
                    Attachment.message_id.in_(message_ids),
                    Attachment.kind == AttachmentKind.IMAGE,
                    Attachment.state == AttachmentState.READY,
                )
                .order_by(Attachment.message_id.desc(), Attachment.id.desc())
                .limit(limit)
            )
            return [_image(row) for row in rows]

    async def to_describe(self, attachment_id: int) -> ImageToDescribe | None:
        """The image, if it is one, ready, sent with a message and not yet described."""
        async with self._sessions() as session:
            row = (
                await session.execute(
                    select(*_IMAGE_COLUMNS, Message.conversation_id)
                    .join(Message, Message.id == Attachment.message_id)
                    .where(
                        Attachment.id == attachment_id,
                        Attachment.kind == AttachmentKind.IMAGE,
                        Attachment.state == AttachmentState.READY,
                        Attachment.text.is_(None),
                    )
                )
            ).one_or_none()
        return None if row is None else ImageToDescribe(row.conversation_id, _image(row))

    async def describe(self, attachment_id: int, description: str) -> bool:
        """Keep an image's description, once, and tell its message's line of it: the
        live window changed other than by an append, so kept windows are read again.
        False if it was described already (or is gone)."""
        async with self._sessions() as session, session.begin():
            message_id = await session.scalar(
                update(Attachment)
                .where(Attachment.id == attachment_id, Attachment.text.is_(None))
                .values(text=description)
                .returning(Attachment.message_id)
            )
            if message_id is None:
                return False
            await _retell(session, message_id)
        return True

    async def shown_to(
        self, attachment_id: int, identity_id: uuid.UUID, conversation_id: uuid.UUID
    ) -> tuple[AttachmentView, bytes] | None:
        """The file, if that person may read it: one they uploaded, or one sent in
        their conversation (by anyone, on any channel); else None, whether or not it
        exists, so nobody learns of another's files."""
        async with self._sessions() as session:
            row = await session.scalar(
                select(Attachment)
                .outerjoin(Message, Message.id == Attachment.message_id)
                .where(
                    Attachment.id == attachment_id,
                    (Attachment.identity_id == identity_id)
                    | (Message.conversation_id == conversation_id),
                )
            )
            return None if row is None else (_view(row), row.data)

    async def to_fetch(self, attachment_id: int) -> FileToFetch | None:
        """The platform file, if it is still to be fetched."""
        async with self._sessions() as session:
            row = (
                await session.execute(
                    select(
                        Attachment.id,
                        Message.channel,
                        Attachment.kind,
                        Attachment.source_ref,
                        Attachment.file_name,
                        Attachment.mime,
                    )
                    .join(Message, Message.id == Attachment.message_id)
                    .where(
                        Attachment.id == attachment_id,
                        Attachment.state == AttachmentState.FETCHING,
                        Attachment.source_ref.is_not(None),
                    )
                )
            ).one_or_none()
        if row is None or row.source_ref is None:
            return None
        return FileToFetch(row.id, row.channel, row.kind, row.source_ref, row.file_name, row.mime)

    async def fetching_of(self, message_ids: Sequence[int]) -> list[int]:
        """The files of these messages still to be fetched."""
        async with self._sessions() as session:
            found = await session.scalars(
                select(Attachment.id).where(
                    Attachment.message_id.in_(message_ids),
                    Attachment.state == AttachmentState.FETCHING,
                )
            )
            return list(found)

    async def left_fetching(self, created_before: datetime, limit: int) -> list[int]:
        """Files still fetching that were stored before `created_before`: a process died
        while fetching them, or their fetch is still retrying."""
        async with self._sessions() as session:
            found = await session.scalars(
                select(Attachment.id)
                .where(
                    Attachment.state == AttachmentState.FETCHING,
                    Attachment.created_at < created_before,
                )
                .order_by(Attachment.id)
                .limit(limit)
            )
            return list(found)

    async def fetched(self, attachment_id: int, result: Fetched) -> bool:
        """Keep what a fetch came to, once, and tell the message's line of it; False if
        it was no longer fetching (another replica kept it first, or it is gone)."""
        values: dict[str, Any] = {"state": result.state}
        if result.kind is not None:
            values["kind"] = result.kind
        if result.state is AttachmentState.READY:
            values |= {
                "mime": result.mime,
                "data": result.data,
                "size": len(result.data),
                "sha256": result.sha256 or hashlib.sha256(result.data).hexdigest(),
                "width": result.width,
                "height": result.height,
                "text": result.text,
            }
        async with self._sessions() as session, session.begin():
            message_id = await session.scalar(
                update(Attachment)
                .where(
                    Attachment.id == attachment_id,
                    Attachment.state == AttachmentState.FETCHING,
                )
                .values(**values)
                .returning(Attachment.message_id)
            )
            if message_id is None:
                return False
            await _retell(session, message_id)
        return True

    async def text_in(
        self, conversation_id: uuid.UUID, attachment_id: int
    ) -> tuple[str, str | None] | None:
        """A file sent in the conversation: its name and its text; None if it is not
        one of the conversation's."""
        async with self._sessions() as session:
            row = (
                await session.execute(
                    select(Attachment.file_name, Attachment.mime, Attachment.text)
                    .join(Message, Message.id == Attachment.message_id)
                    .where(
                        Attachment.id == attachment_id,
                        Message.conversation_id == conversation_id,
                    )
                )
            ).one_or_none()
        return None if row is None else (row.file_name or row.mime, row.text)

    async def drop_unsent(self, uploaded_before: datetime) -> int:
        """Forget uploads no message took by `uploaded_before`; how many."""
        async with self._sessions() as session, session.begin():
            dropped = await session.execute(
                delete(Attachment)
                .where(
                    Attachment.message_id.is_(None),
                    Attachment.created_at < uploaded_before,
                )
                .returning(Attachment.id)
            )
            return len(dropped.all())

    async def content(self, attachment_id: int) -> tuple[AttachmentView, bytes] | None:
        async with self._sessions() as session:
            row = await session.get(Attachment, attachment_id)
            return None if row is None else (_view(row), row.data)


_IMAGE_COLUMNS = (
    Attachment.id,
    Attachment.message_id,
    Attachment.mime,
    Attachment.width,
    Attachment.height,
    Attachment.data,
    Attachment.text,
)


def _image(row: Any) -> StoredImage:
    return StoredImage(
        row.id,
        int(row.message_id),
        row.mime,
        row.width or 0,
        row.height or 0,
        row.data,
        row.text is not None,
    )


def _view(row: Attachment) -> AttachmentView:
    return AttachmentView(
        row.id,
        row.message_id,
        row.kind,
        row.state,
        row.mime,
        row.size,
        row.file_name,
        row.width,
        row.height,
        row.text,
        row.duration,
    )
