"""Storage model: users, identities, conversations, messages and archive chunks.

Every schema change is an Alembic migration in `migrations/versions/`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Enum,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    Uuid,
    false,
    true,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite keeps no offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Integer primary keys: SQLite only autoincrements INTEGER, Postgres wants BIGINT.
BigId = BigInteger().with_variant(Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    EVENT = "event"


class ConversationKind(StrEnum):
    PERSONAL = "personal"
    GROUP = "group"


class Delivery(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    # Receipts from platforms that report them (WhatsApp statuses).
    DELIVERED = "delivered"
    READ = "read"
    FAILED = "failed"


class ChunkStatus(StrEnum):
    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


def _enum(values: type[StrEnum]) -> Enum:
    """A column of one of these enums, stored as its value in a VARCHAR(16) (no native
    enum type, no CHECK: adding a value needs no migration on either database)."""
    return Enum(
        values,
        native_enum=False,
        create_constraint=False,
        length=16,
        values_callable=lambda members: [member.value for member in members],
    )


class User(Base):
    __tablename__ = "users"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    display_name: Mapped[str] = mapped_column(String(200), default="")
    timezone: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # `/followups off`: the assistant makes no follow-ups of its own for this person.
    follow_ups: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # Tokens this person's turns may take a day, set by an operator (None: the
    # deployment's PARLEY_DAILY_TOKENS_PER_PERSON).
    daily_tokens: Mapped[int | None] = mapped_column(BigInteger)


class Identity(Base):
    __tablename__ = "identities"
    __table_args__ = (UniqueConstraint("channel", "external_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    channel: Mapped[str] = mapped_column(String(32))
    external_id: Mapped[str] = mapped_column(String(200))
    user_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    display_name: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # How far this person has read their conversation on this channel (the web chat's
    # unread badge, the same on every device).
    seen_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class Conversation(Base):
    __tablename__ = "conversations"
    __table_args__ = (UniqueConstraint("channel", "group_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    kind: Mapped[ConversationKind] = mapped_column(
        _enum(ConversationKind), default=ConversationKind.PERSONAL
    )
    # Personal conversations belong to a user; group ones to a (channel, group id).
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), unique=True
    )
    channel: Mapped[str | None] = mapped_column(String(32))
    group_id: Mapped[str | None] = mapped_column(String(200))
    title: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_message_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Seq bookkeeping, bumped in the statement that reserves a seq, so finding the
    # conversations that still owe a reply never scans messages.
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    last_user_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    answered_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    # Bumped, in the same transaction, by every change to the live window (messages
    # with no chunk) but an append at a new seq: an archive swap, an erasure, a merge,
    # an import. A live window kept in memory is good while this has not moved.
    live_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The day (in the conversation's zone) its owner was last told the day's tokens
    # are spent: told once a day.
    budget_notice_on: Mapped[date | None] = mapped_column(Date)


class Chunk(Base):
    __tablename__ = "chunks"
    __table_args__ = (
        # Also makes cutting and rolling up idempotent across replicas.
        UniqueConstraint("conversation_id", "level", "seq_start"),
        # Roots (no parent) are the few chunks a turn or roll-up looks at: unswapped
        # and pending chunks are always roots, so no query scans a whole archive.
        Index("ix_chunks_roots", "conversation_id", "parent_id", "level", "seq_start"),
        Index("ix_chunks_due", "status", "next_attempt_at"),
        Index("ix_chunks_extract", "facts_extracted", "status", "level"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    level: Mapped[int] = mapped_column(Integer)
    seq_start: Mapped[int] = mapped_column(BigInteger)
    seq_end: Mapped[int] = mapped_column(BigInteger)
    time_start: Mapped[datetime] = mapped_column(UTCDateTime)
    time_end: Mapped[datetime] = mapped_column(UTCDateTime)
    transcript: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[str | None] = mapped_column(Text)
    status: Mapped[ChunkStatus] = mapped_column(_enum(ChunkStatus), default=ChunkStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("chunks.id", ondelete="SET NULL"), index=True
    )
    # Level 0: its messages left the live window and it shows in the timeline. Set in
    # the same transaction that moves the messages (the swap at a turn's start).
    in_timeline: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # A worker holds the chunk until then; the database, not the queue, says who works.
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    user_notified: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Level 0: the person's facts were taken from it into their profile (once).
    facts_extracted: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq"),
        UniqueConstraint("channel", "platform_message_id"),
        Index("ix_messages_reply", "conversation_id", "reply_to_seq"),
        # The live window (chunk_id IS NULL) without walking the archived messages.
        Index("ix_messages_live", "conversation_id", "chunk_id", "seq"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[Role] = mapped_column(_enum(Role))
    channel: Mapped[str] = mapped_column(String(32))
    identity_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("identities.id", ondelete="SET NULL")
    )
    author_name: Mapped[str] = mapped_column(String(200), default="")
    # Who produced input nobody typed (e.g. "operator via REST"); null for typed text.
    source: Mapped[str | None] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)
    platform_message_id: Mapped[str | None] = mapped_column(String(255))
    platform_ts: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    # A model's reply: about how many tokens its turn's prompt was (is memory keeping
    # the prompt bounded?).
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    # A model's reply: which model wrote it (the main one, or a fallback).
    model: Mapped[str | None] = mapped_column(String(200))
    # A model's reply: the tokens its calls took, as the servers counted them.
    usage_prompt: Mapped[int | None] = mapped_column(BigInteger)
    usage_cached: Mapped[int | None] = mapped_column(BigInteger)
    usage_completion: Mapped[int | None] = mapped_column(BigInteger)
    # What the message's files are, one line each as the gateway writes them for a
    # model ("[image 1280×960, not described]"): read with the message, no join.
    media: Mapped[str | None] = mapped_column(Text)
    chunk_id: Mapped[int | None] = mapped_column(
        ForeignKey("chunks.id", ondelete="SET NULL"), index=True
    )
    # For replies: the last user seq the turn answered (so a user message finds its reply).
    reply_to_seq: Mapped[int | None] = mapped_column(BigInteger)
    delivery: Mapped[Delivery | None] = mapped_column(_enum(Delivery))
    delivery_attempts: Mapped[int] = mapped_column(Integer, default=0)
    delivery_error: Mapped[str | None] = mapped_column(Text)
    # How many parts of a split reply the platform took: a retry resumes after them.
    delivery_parts_sent: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The part whose send call is in flight, set just before it; cleared when the
    # platform's answer is recorded. Still set at a restart: that part is uncertain.
    delivery_sending_part: Mapped[int | None] = mapped_column(Integer)
    # Parts found uncertain at a restart (resent or skipped, by PARLEY_DELIVERY_UNCERTAIN).
    delivery_uncertain: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


# -- access policy, identity linking and delivery receipts (connectors) ---------------


class PairingRequest(Base):
    """An unknown person asking to talk to the bot on a `pairing` channel."""

    __tablename__ = "pairing_requests"
    __table_args__ = (UniqueConstraint("channel", "external_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(32))
    external_id: Mapped[str] = mapped_column(String(200))
    display_name: Mapped[str] = mapped_column(String(200), default="")
    code: Mapped[str] = mapped_column(String(16), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Set by the operator; from then on the person is let in for good.
    approved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class LinkCode(Base):
    """A one-time code that attaches another channel's identity to the issuer's user."""

    __tablename__ = "link_codes"

    code: Mapped[str] = mapped_column(String(16), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    identity_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("identities.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class SentPart(Base):
    """One platform message that carried (part of) a reply, for receipts to find."""

    __tablename__ = "sent_parts"
    __table_args__ = (
        UniqueConstraint("channel", "platform_message_id"),
        UniqueConstraint("message_id", "part"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"))
    part: Mapped[int] = mapped_column(Integer)
    channel: Mapped[str] = mapped_column(String(32))
    platform_message_id: Mapped[str] = mapped_column(String(255))
    status: Mapped[Delivery] = mapped_column(_enum(Delivery), default=Delivery.SENT)
    error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class StreamPreview(Base):
    """A message on a platform that shows a reply while it is written and is edited
    into the reply's first part (DESIGN §10): kept from when it is first sent until
    that edit, so a turn run again after a crash finishes it instead of sending a
    second copy."""

    __tablename__ = "stream_previews"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    # The last message the turn answers: its reply (`reply_to_seq`) finishes the preview.
    trigger_seq: Mapped[int] = mapped_column(BigInteger)
    channel: Mapped[str] = mapped_column(String(32))
    # The group, or the person's private chat, the preview is in.
    chat: Mapped[str] = mapped_column(String(255))
    platform_message_id: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# -- profile: lasting facts about a person ---------------------------------------------


class Profile(Base):
    """A person's facts, one per line. Every change bumps `revision`; an edit made
    against an older revision is refused instead of overwriting newer lines."""

    __tablename__ = "profiles"

    user_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    text: Mapped[str] = mapped_column(Text, default="")
    revision: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Tidying: consecutive failures, when it may run again, and (after a tidy that could
    # not shrink the profile) the size it must pass first.
    tidy_failures: Mapped[int] = mapped_column(Integer, default=0)
    tidy_not_before: Mapped[datetime | None] = mapped_column(UTCDateTime)
    tidy_after_chars: Mapped[int] = mapped_column(Integer, default=0)
    # JSON, one list per line of `text`: the typed messages each fact came from
    # (memory.profile.Evidence). Null, or a line past its end: evidence unknown.
    evidence: Mapped[str | None] = mapped_column(Text)
    # Facts extraction offered without a typed message to cite: refused, and counted.
    facts_refused: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class RetiredFact(Base):
    """Every profile line ever removed or shortened, word for word. Append-only."""

    __tablename__ = "retired_facts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    text: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(String(32))
    profile_revision: Mapped[int] = mapped_column(Integer)
    retired_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The retired line's evidence, as in `Profile.evidence` (null: unknown).
    evidence: Mapped[str | None] = mapped_column(Text)


class ProfileChange(Base):
    """Who changed a profile, when, and which lines came and went: every revision's
    record. Append-only; the lines' text is also in the profile or its retired facts."""

    __tablename__ = "profile_changes"
    __table_args__ = (Index("ix_profile_changes_user_id_id", "user_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # The revision the change made.
    revision: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    # "operator", "person: /forget", "model: facts from archive #12", "model: tidying"...
    by: Mapped[str] = mapped_column(String(100))
    # JSON lists of lines.
    added: Mapped[str] = mapped_column(Text)
    removed: Mapped[str] = mapped_column(Text)


class Lookup(Base):
    """What the model looked up in a turn (a recall tool call) and what it read back.
    Kept apart from the messages: never in the live window or a transcript."""

    __tablename__ = "lookups"
    __table_args__ = (Index("ix_lookups_conversation_id_id", "conversation_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    # The last message the turn answered (an id: seqs change when conversations merge).
    message_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    tool: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[str] = mapped_column(Text)
    result: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class OperatorSession(Base):
    """A signed-in operator's browser (the dashboard). Only the hash of the cookie's
    token is kept."""

    __tablename__ = "operator_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    # Which admin token signed it in: changing PARLEY_ADMIN_TOKEN signs everyone out.
    admin_key: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


# -- leases: which process does a piece of work, decided by the database ---------------


class Lease(Base):
    """A named piece of work held by one process until `expires_at` (renewed while it
    works). A holder that dies lets its lease lapse, and another takes over."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # What the holder says of the work at its last renewal ("connected", "reconnecting");
    # null: it says nothing.
    state: Mapped[str | None] = mapped_column(String(200))


# -- watermarks: how far a platform's history has been read ----------------------------


class Watermark(Base):
    """How far the history of one chat on a platform (a Discord channel, or a person's
    DM channel) has been read: every message up to `position` (the platform's
    increasing message id) is stored, or was seen and left alone. After a disconnect
    the connector reads what came after it."""

    __tablename__ = "watermarks"

    channel: Mapped[str] = mapped_column(String(32), primary_key=True)
    place: Mapped[str] = mapped_column(String(200), primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger)
    # A direct chat with one person (DMs cannot be listed: this is how they are known).
    private: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


# -- idempotency: operators' POSTs answered once ---------------------------------------


class IdempotentRequest(Base):
    """A POST made with an `Idempotency-Key`: what it asked and what it was answered,
    so a replay gets the first answer on whichever replica it lands."""

    __tablename__ = "idempotent_requests"

    # SHA-256 of the key as sent: any header text fits, none is stored.
    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    # SHA-256 of method, path and body: the same key with another request is refused.
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int | None] = mapped_column(Integer)
    response: Mapped[str | None] = mapped_column(Text)
    # The conversation or person the answer is about: an erasure takes the answers
    # with it (they may quote what the person said).
    subject: Mapped[uuid.UUID | None] = mapped_column(Uuid, index=True)
    # While the first request runs, a replay is told it is in progress; a process that
    # died with it lets the claim lapse.
    claimed_until: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


# -- a person's own rights: their export, their erasure --------------------------------


class ExportLink(Base):
    """A one-time link to a person's own export (`/export`), valid for a day."""

    __tablename__ = "export_links"

    # SHA-256 of the token in the link: the database never holds a usable link.
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ErasureCode(Base):
    """The code `/erase` answers with; `/erase CODE` within minutes erases the person."""

    __tablename__ = "erasure_codes"

    code: Mapped[str] = mapped_column(String(16), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


# -- schedules: what the assistant says first, at a person's time ----------------------


class ScheduleKind(StrEnum):
    REMINDER = "reminder"  # the person asked: fires at its time, quiet hours or not
    FOLLOW_UP = "follow_up"  # the assistant's own idea: quiet hours and a daily cap


class ScheduleState(StrEnum):
    ACTIVE = "active"
    DONE = "done"
    CANCELLED = "cancelled"


class FireOutcome(StrEnum):
    SENT = "sent"  # within the grace window
    LATE = "late"  # after it (the gateway was down): once, saying when it was due
    HELD = "held"  # nowhere to send it yet
    SKIPPED = "skipped"  # a follow-up past the day's cap, or with follow-ups off
    FAILED = "failed"


class Schedule(Base):
    """A reminder or follow-up of one conversation. Its times are wall-clock times in
    the person's zone (kept as text, `YYYY-MM-DDTHH:MM:SS`, no offset); `next_due_at`
    is the next one in UTC, null once it is done or cancelled."""

    __tablename__ = "schedules"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[ScheduleKind] = mapped_column(_enum(ScheduleKind))
    text: Mapped[str] = mapped_column(Text)
    # The first wall-clock time asked for (a repeat's start) and the zone it was read in.
    starts_local: Mapped[str] = mapped_column(String(19))
    zone: Mapped[str] = mapped_column(String(64))
    # An RFC 5545 RRULE, or null for once.
    repeat: Mapped[str | None] = mapped_column(String(500))
    # Where it is sent; null: the channel of the person's newest typed message.
    channel: Mapped[str | None] = mapped_column(String(32))
    # "the person", "the assistant" or "an operator".
    created_by: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    state: Mapped[ScheduleState] = mapped_column(_enum(ScheduleState), default=ScheduleState.ACTIVE)
    next_local: Mapped[str | None] = mapped_column(String(19))
    # The sweep's one indexed question: what is due by now.
    next_due_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)


class ScheduleFire(Base):
    """One firing of a schedule. Unique on (schedule, due time): inserting this row is
    the only way a firing happens, so each due time fires once across replicas,
    restarts and kills."""

    __tablename__ = "schedule_fires"
    __table_args__ = (
        UniqueConstraint("schedule_id", "due_at"),
        # Held firings, looked for now and then to send once the person writes.
        Index("ix_schedule_fires_outcome", "outcome"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    schedule_id: Mapped[int] = mapped_column(ForeignKey("schedules.id", ondelete="CASCADE"))
    due_at: Mapped[datetime] = mapped_column(UTCDateTime)
    fired_at: Mapped[datetime] = mapped_column(UTCDateTime)
    outcome: Mapped[FireOutcome] = mapped_column(_enum(FireOutcome))
    # Due times of a repeat that passed unsent (the gateway was down), collapsed into
    # this one firing.
    missed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The message the firing put into the conversation (null when nothing was).
    message_id: Mapped[int | None] = mapped_column(
        BigId, ForeignKey("messages.id", ondelete="SET NULL")
    )
    detail: Mapped[str | None] = mapped_column(String(500))


class UsageKind(StrEnum):
    TURN = "turn"
    BACKGROUND = "background"  # summaries, extraction, tidying


class UsageDay(Base):
    """The tokens one person's (or one group's) model calls took on one day of their
    zone, by model and kind of work: what reports and the daily budget read."""

    __tablename__ = "usage_days"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    # A person's user id, or a group's conversation id (`group` says which).
    subject: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    kind: Mapped[UsageKind] = mapped_column(_enum(UsageKind), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    group: Mapped[bool] = mapped_column(Boolean, default=False)
    calls: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt: Mapped[int] = mapped_column(BigInteger, default=0)
    cached: Mapped[int] = mapped_column(BigInteger, default=0)
    completion: Mapped[int] = mapped_column(BigInteger, default=0)


class AttachmentKind(StrEnum):
    IMAGE = "image"
    AUDIO = "audio"
    DOCUMENT = "document"
    OTHER = "other"


class AttachmentState(StrEnum):
    READY = "ready"
    FETCHING = "fetching"  # a platform's file, not fetched yet
    FAILED = "failed"
    TOO_LARGE = "too_large"
    UNSUPPORTED = "unsupported"


class Attachment(Base):
    """A file a person sent with a message (DESIGN §11), its bytes kept here so every
    replica has them and export and erasure are complete. Uploaded before its message
    (web chat), it belongs to the identity that uploaded it until a message of theirs
    takes it."""

    __tablename__ = "attachments"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    identity_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("identities.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[AttachmentKind] = mapped_column(_enum(AttachmentKind))
    # The fetch sweep looks for files left fetching by a process that died.
    state: Mapped[AttachmentState] = mapped_column(_enum(AttachmentState), index=True)
    mime: Mapped[str] = mapped_column(String(100))  # sniffed from the bytes
    size: Mapped[int] = mapped_column(BigInteger)  # of `data`, as kept
    sha256: Mapped[str] = mapped_column(String(64))
    file_name: Mapped[str] = mapped_column(String(255), default="")
    width: Mapped[int | None] = mapped_column(Integer)
    height: Mapped[int | None] = mapped_column(Integer)
    # Seconds a voice note or audio file plays, as the platform says.
    duration: Mapped[int | None] = mapped_column(Integer)
    # A platform's own id of the file, to fetch it by (never a URL: one may carry the
    # bot's token); None for an upload.
    source_ref: Mapped[str | None] = mapped_column(String(512))
    # What a model reads of it where it does not see it: a description, a transcript,
    # a document's text.
    text: Mapped[str | None] = mapped_column(Text)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
