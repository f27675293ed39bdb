"""attachments.source_ref and duration: a platform's file, fetched after its message is
stored; how long a voice note or audio file plays

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 23:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs on both databases (a batch would copy the table on SQLite).
    op.add_column("attachments", sa.Column("source_ref", sa.String(512), nullable=True))
    op.add_column("attachments", sa.Column("duration", sa.Integer(), nullable=True))
    # The fetch sweep looks for files left fetching by a process that died.
    op.create_index(op.f("ix_attachments_state"), "attachments", ["state"])


def downgrade() -> None:
    op.drop_index(op.f("ix_attachments_state"), table_name="attachments")
    with op.batch_alter_table("attachments") as batch:
        batch.drop_column("duration")
        batch.drop_column("source_ref")
