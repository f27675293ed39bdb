"""stream_previews: a reply's preview message, edited into its first part

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 18:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_UTC = memory.storage.models.UTCDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "stream_previews",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("trigger_seq", sa.BigInteger(), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("chat", sa.String(length=255), nullable=False),
        sa.Column("platform_message_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", _UTC, nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_stream_previews_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stream_previews")),
    )
    op.create_index(
        op.f("ix_stream_previews_conversation_id"),
        "stream_previews",
        ["conversation_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_stream_previews_conversation_id"), table_name="stream_previews")
    op.drop_table("stream_previews")
