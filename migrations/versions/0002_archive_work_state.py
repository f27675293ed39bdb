"""archive work state: leases, retries, timeline flag and the indexes that keep turns
independent of archive size

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 21:55:32.157774
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_chunks_conversation_level")
        batch_op.create_unique_constraint(
            "uq_chunks_conversation_id_level_seq_start", ["conversation_id", "level", "seq_start"]
        )
        batch_op.add_column(
            sa.Column("in_timeline", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(
            sa.Column(
                "lease_until", memory.storage.models.UTCDateTime(timezone=True), nullable=True
            )
        )
        batch_op.add_column(
            sa.Column(
                "next_attempt_at", memory.storage.models.UTCDateTime(timezone=True), nullable=True
            )
        )
        batch_op.add_column(
            sa.Column("user_notified", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.create_index(
            "ix_chunks_roots", ["conversation_id", "parent_id", "level", "seq_start"]
        )
        batch_op.create_index("ix_chunks_due", ["status", "next_attempt_at"])
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index("ix_messages_live", ["conversation_id", "chunk_id", "seq"])


def downgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_live")
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_chunks_due")
        batch_op.drop_index("ix_chunks_roots")
        batch_op.drop_column("user_notified")
        batch_op.drop_column("next_attempt_at")
        batch_op.drop_column("lease_until")
        batch_op.drop_column("in_timeline")
        batch_op.drop_constraint("uq_chunks_conversation_id_level_seq_start", type_="unique")
        batch_op.create_index(
            "ix_chunks_conversation_level", ["conversation_id", "level", "seq_start"], unique=False
        )
