"""schedules and schedule_fires: reminders and follow-ups; users.follow_ups

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 15:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_UTC = memory.storage.models.UTCDateTime(timezone=True)


def upgrade() -> None:
    # A plain ADD COLUMN on both: a batch would copy and drop `users` on SQLite, which
    # failed there ("database table is locked") on a database holding people.
    op.add_column(
        "users", sa.Column("follow_ups", sa.Boolean(), server_default=sa.true(), nullable=False)
    )
    op.create_table(
        "schedules",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column(
            "kind",
            sa.Enum("reminder", "follow_up", native_enum=False, create_constraint=False, length=16),
            nullable=False,
        ),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("starts_local", sa.String(length=19), nullable=False),
        sa.Column("zone", sa.String(length=64), nullable=False),
        sa.Column("repeat", sa.String(length=500), nullable=True),
        sa.Column("channel", sa.String(length=32), nullable=True),
        sa.Column("created_by", sa.String(length=32), nullable=False),
        sa.Column("created_at", _UTC, nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "active", "done", "cancelled", native_enum=False, create_constraint=False, length=16
            ),
            nullable=False,
        ),
        sa.Column("next_local", sa.String(length=19), nullable=True),
        sa.Column("next_due_at", _UTC, nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_schedules_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
    )
    op.create_index(
        op.f("ix_schedules_conversation_id"), "schedules", ["conversation_id"], unique=False
    )
    op.create_index(op.f("ix_schedules_next_due_at"), "schedules", ["next_due_at"], unique=False)
    op.create_table(
        "schedule_fires",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("schedule_id", _ID, nullable=False),
        sa.Column("due_at", _UTC, nullable=False),
        sa.Column("fired_at", _UTC, nullable=False),
        sa.Column(
            "outcome",
            sa.Enum(
                "sent",
                "late",
                "held",
                "skipped",
                "failed",
                native_enum=False,
                create_constraint=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("missed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("message_id", _ID, nullable=True),
        sa.Column("detail", sa.String(length=500), nullable=True),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_schedule_fires_schedule_id_schedules"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_schedule_fires_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedule_fires")),
        sa.UniqueConstraint(
            "schedule_id", "due_at", name=op.f("uq_schedule_fires_schedule_id_due_at")
        ),
    )
    op.create_index("ix_schedule_fires_outcome", "schedule_fires", ["outcome"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_schedule_fires_outcome", table_name="schedule_fires")
    op.drop_table("schedule_fires")
    op.drop_index(op.f("ix_schedules_next_due_at"), table_name="schedules")
    op.drop_index(op.f("ix_schedules_conversation_id"), table_name="schedules")
    op.drop_table("schedules")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("follow_ups")
