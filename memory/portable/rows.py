"""Records of the export format read into rows for the database, every field checked
(`Fields`) and every text cleaned. Nothing here touches the database."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.portable.format import AuthorKey, ChunkKey, Fields
from memory.profile.facts import Evidence
from memory.provenance import from_gateway
from memory.storage.models import (
    AttachmentKind,
    AttachmentState,
    ChunkStatus,
    Delivery,
    FireOutcome,
    Role,
    ScheduleKind,
    ScheduleState,
)
from memory.token_count import message_tokens
from memory.zones import known_zone

# Column widths (memory.storage.models): Postgres refuses longer values. Names are cut
# to fit; ids are refused, as a cut id could name someone else.
CHANNEL_CHARS = 32
NAME_CHARS = 200
ID_CHARS = 200
MESSAGE_ID_CHARS = 255
MODEL_CHARS = 200  # the column's width
# A message's media lines: a line a file, ten files at most.
MEDIA_CHARS = 10_000
TIMEZONE_CHARS = 64
REASON_CHARS = 32

# An exported reply that was never delivered is not sent on import, long after: it is
# marked failed with this reason, where an operator can send it again.
NOT_DELIVERED = "not delivered before it was exported"

# The source line of an imported message that had one. A source line is the gateway's
# word on how a message reached it (memory.provenance: an operator, recall's archive, a
# connector's forwards and edits); a file's is only the file's word, so whatever it says,
# the model reads that the message was imported. Text with none stays typed text
# (escaped as such): the person's own words, in their own history (owner.py).
IMPORTED_SOURCE = "imported"


@dataclass(frozen=True, slots=True)
class Person:
    display_name: str
    timezone: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class IdentityRow:
    key: AuthorKey
    display_name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ConversationRow:
    title: str
    created_at: datetime
    last_message_at: datetime | None
    last_seq: int
    last_user_seq: int
    # (seq, time) of its first message: which history it is (None: it has none).
    first: tuple[int, datetime] | None


@dataclass(frozen=True, slots=True)
class ChunkRow:
    key: ChunkKey
    parent: ChunkKey | None
    values: dict[str, Any]  # the columns, but for conversation and parent

    @property
    def transcript(self) -> str | None:
        text: str | None = self.values["transcript"]
        return text


@dataclass(frozen=True, slots=True)
class MessageRow:
    author: AuthorKey | None
    chunk: ChunkKey | None
    values: dict[str, Any]  # the columns, but for conversation, identity and chunk


@dataclass(frozen=True, slots=True)
class Fact:
    """A profile line or a retired fact; evidence names chunks by key still."""

    text: str
    evidence: list[tuple[ChunkKey | None, tuple[int, ...], datetime]] | None
    reason: str = ""
    profile_revision: int = 0
    retired_at: datetime | None = None


def person(header: Fields) -> Person:
    user = header.data.get("user")
    if not isinstance(user, dict):
        raise header.error("the header has no 'user'")
    fields = Fields(user, header.line, header.clean)
    timezone = fields.text("timezone", limit=TIMEZONE_CHARS)
    if not known_zone(timezone):
        raise header.error(f"unknown time zone {timezone!r}")
    return Person(
        fields.text("display_name", limit=NAME_CHARS, cut=True),
        timezone,
        fields.time("created_at"),
    )


def identity(record: Fields) -> IdentityRow:
    key = (
        record.text("channel", limit=CHANNEL_CHARS),
        record.text("external_id", limit=ID_CHARS),
    )
    return IdentityRow(
        key,
        record.text_or_none("display_name", limit=NAME_CHARS, cut=True) or "",
        record.time("created_at"),
    )


def conversation(record: Fields) -> ConversationRow:
    if record.text("kind") != "personal":
        raise record.error("only a person's own conversation can be imported")
    return ConversationRow(
        title=record.text_or_none("title", limit=NAME_CHARS, cut=True) or "",
        created_at=record.time("created_at"),
        last_message_at=record.time_or_none("last_message_at"),
        last_seq=record.integer_or_none("last_seq") or 0,
        last_user_seq=record.integer_or_none("last_user_seq") or 0,
        first=_first_message(record),
    )


def _first_message(record: Fields) -> tuple[int, datetime] | None:
    first = record.data.get("first_message")
    if first is None:
        return None
    if not isinstance(first, dict):
        raise record.error("'first_message' must be an object")
    fields = Fields(first, record.line, record.clean)
    return fields.integer("seq"), fields.time("created_at")


def chunk(record: Fields) -> ChunkRow:
    level, seq_start = record.integer("level"), record.integer("seq_start")
    seq_end = record.integer("seq_end")
    if seq_end < seq_start:
        raise record.error("'seq_end' is before 'seq_start'")
    values = {
        "level": level,
        "seq_start": seq_start,
        "seq_end": seq_end,
        "time_start": record.time("time_start"),
        "time_end": record.time("time_end"),
        "transcript": record.text_or_none("transcript"),
        "summary": record.text_or_none("summary"),
        "status": record.choice("status", ChunkStatus),
        "attempts": record.integer_or_none("attempts") or 0,
        "last_error": record.text_or_none("last_error"),
        "in_timeline": record.flag("in_timeline"),
        "facts_extracted": record.flag("facts_extracted"),
        "created_at": record.time("created_at"),
        "updated_at": record.time("updated_at"),
    }
    return ChunkRow((level, seq_start), record.chunk_key("parent"), values)


def message(record: Fields) -> MessageRow:
    text = record.text("text")
    delivery = record.choice_or_none("delivery", Delivery)
    error = record.text_or_none("delivery_error")
    if delivery is Delivery.PENDING:
        delivery, error = Delivery.FAILED, NOT_DELIVERED
    values = {
        "seq": record.integer("seq"),
        "role": record.choice("role", Role),
        "channel": record.text("channel", limit=CHANNEL_CHARS),
        "author_name": record.text_or_none("author_name", limit=NAME_CHARS, cut=True) or "",
        "source": _source(record),
        "text": text,
        "platform_message_id": record.text_or_none("platform_message_id", limit=MESSAGE_ID_CHARS),
        "platform_ts": record.time_or_none("platform_ts"),
        "created_at": record.time("created_at"),
        # Counted here, as when it was stored: the file's count only informs.
        "token_count": message_tokens(text),
        "reply_to_seq": record.integer_or_none("reply_to_seq"),
        "delivery": delivery,
        "delivery_attempts": record.integer_or_none("delivery_attempts") or 0,
        "delivery_error": error,
        "model": record.text_or_none("model", limit=MODEL_CHARS, cut=True),
        "usage_prompt": record.integer_or_none("usage_prompt"),
        "usage_cached": record.integer_or_none("usage_cached"),
        "usage_completion": record.integer_or_none("usage_completion"),
        "media": record.text_or_none("media", limit=MEDIA_CHARS, cut=True),
    }
    return MessageRow(record.author_key("author"), record.chunk_key("chunk"), values)


@dataclass(frozen=True, slots=True)
class AttachmentRow:
    seq: int  # its message's
    values: dict[str, Any]  # the columns, but for the message


# A file's text (a transcript, a description, a document's words) as a model reads it.
FILE_TEXT_CHARS = 1_000_000
MIME_CHARS = 100
FILE_NAME_CHARS = 255


def attachment(record: Fields) -> AttachmentRow:
    encoded = record.text("data")
    try:
        data = base64.b64decode(encoded, validate=True)
    except ValueError:
        raise record.error("'data' is not base64") from None
    digest = hashlib.sha256(data).hexdigest()
    said = record.text_or_none("sha256")
    if said is not None and said != digest:
        raise record.error("the file's bytes do not match its sha256")
    state = record.choice("state", AttachmentState)
    if state is AttachmentState.FETCHING:
        # Never fetched before the export: it will not be here either.
        state = AttachmentState.FAILED
    values = {
        "kind": record.choice("kind", AttachmentKind),
        "state": state,
        "mime": record.text_or_none("mime", limit=MIME_CHARS) or "application/octet-stream",
        "file_name": record.text_or_none("file_name", limit=FILE_NAME_CHARS, cut=True) or "",
        "width": record.integer_or_none("width"),
        "height": record.integer_or_none("height"),
        "duration": record.integer_or_none("duration"),
        "text": record.text_or_none("text", limit=FILE_TEXT_CHARS, cut=True),
        "created_at": record.time("created_at"),
        "size": len(data),
        "sha256": digest,
        "data": data,
    }
    return AttachmentRow(record.integer("seq"), values)


def _source(record: Fields) -> str | None:
    source = record.text_or_none("source")
    if source is None:
        return None
    # What the gateway said to the person (notices, command answers) keeps its label:
    # that label only takes a message out of what a model reads, never puts words in
    # front of it, and a round trip keeps `/status` and its answer out of the dialogue.
    return source if from_gateway(source) else IMPORTED_SOURCE


def profile_line(record: Fields) -> Fact:
    # One line of the profile's text, as the gateway writes one: any line break (U+2028
    # and NEL too) would split it in two in the system prompt.
    line = " ".join(record.text("text").split())
    return Fact(line, _evidence(record))


def retired_fact(record: Fields) -> Fact:
    return Fact(
        record.text("text"),
        _evidence(record),
        reason=record.text("reason", limit=REASON_CHARS, cut=True),
        profile_revision=record.integer_or_none("profile_revision") or 0,
        retired_at=record.time("retired_at"),
    )


def evidence_json(
    evidence: list[tuple[ChunkKey | None, tuple[int, ...], datetime]] | None,
    chunk_ids: dict[ChunkKey, int],
) -> list[dict[str, Any]]:
    """Evidence as the profile stores it (memory.profile.Evidence), its chunks named by
    their ids here; 0 for a chunk the export did not have (the seqs and time stay)."""
    return [
        Evidence(0 if key is None else chunk_ids.get(key, 0), seqs, at).to_json()
        for key, seqs, at in evidence or ()
    ]


def _evidence(record: Fields) -> list[tuple[ChunkKey | None, tuple[int, ...], datetime]] | None:
    sources = record.data.get("evidence")
    if sources is None:
        return None
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        raise record.error("'evidence' must be a list of objects")
    read = []
    for source in sources:
        fields = Fields(source, record.line, record.clean)
        seqs = source.get("seqs")
        if not isinstance(seqs, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seqs
        ):
            raise record.error("evidence 'seqs' must be a list of whole numbers")
        read.append((fields.chunk_key("chunk"), tuple(seqs), fields.time("at")))
    return read


# A schedule's wall-clock times: YYYY-MM-DDTHH:MM:SS, no offset.
LOCAL = "%Y-%m-%dT%H:%M:%S"
SCHEDULE_TEXT_CHARS = 1000
REPEAT_CHARS = 500
BY_CHARS = 32
DETAIL_CHARS = 500


@dataclass(frozen=True, slots=True)
class FireRow:
    due_at: datetime
    fired_at: datetime
    outcome: FireOutcome
    missed: int
    detail: str | None


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    kind: ScheduleKind
    text: str
    starts_local: str
    zone: str
    repeat: str | None
    channel: str | None
    created_by: str
    created_at: datetime
    state: ScheduleState
    next_local: str | None
    next_due_at: datetime | None
    fires: tuple[FireRow, ...]


def schedule(record: Fields) -> ScheduleRow:
    state = record.choice("state", ScheduleState)
    next_local = _local_or_none(record, "next_local")
    next_due_at = record.time_or_none("next_due_at")
    # Only an active schedule has a next time, and it has both.
    if state is ScheduleState.ACTIVE and (next_local is None or next_due_at is None):
        raise record.error("an active schedule needs next_local and next_due_at")
    if state is not ScheduleState.ACTIVE:
        next_local, next_due_at = None, None
    starts_local = _local_or_none(record, "starts_local")
    if starts_local is None:
        raise record.error("'starts_local' is missing")
    zone = record.text("zone", limit=TIMEZONE_CHARS)
    if not known_zone(zone):
        raise record.error(f"unknown time zone {zone!r}")
    return ScheduleRow(
        kind=record.choice("kind", ScheduleKind),
        text=" ".join(record.text("text", limit=SCHEDULE_TEXT_CHARS, cut=True).split()),
        starts_local=starts_local,
        zone=zone,
        repeat=record.text_or_none("repeat", limit=REPEAT_CHARS),
        channel=record.text_or_none("channel", limit=CHANNEL_CHARS),
        created_by=record.text("created_by", limit=BY_CHARS, cut=True),
        created_at=record.time("created_at"),
        state=state,
        next_local=next_local,
        next_due_at=next_due_at,
        fires=tuple(_fire(record, fire) for fire in _list(record, "fires")),
    )


def _local_or_none(record: Fields, name: str) -> str | None:
    value = record.text_or_none(name, limit=19)
    if value is None:
        return None
    try:
        datetime.strptime(value, LOCAL)
    except ValueError:
        raise record.error(f"{name!r} must be a wall-clock time YYYY-MM-DDTHH:MM:SS") from None
    return value


def _list(record: Fields, name: str) -> list[Any]:
    value = record.data.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise record.error(f"{name!r} must be a list")
    return value


def _fire(record: Fields, data: Any) -> FireRow:
    if not isinstance(data, dict):
        raise record.error("a firing must be an object")
    fire = Fields(data, record.line, record.clean)
    return FireRow(
        due_at=fire.time("due_at"),
        fired_at=fire.time("fired_at"),
        outcome=fire.choice("outcome", FireOutcome),
        missed=fire.integer_or_none("missed") or 0,
        detail=fire.text_or_none("detail", limit=DETAIL_CHARS, cut=True),
    )
