"""operator_sessions: signed-in dashboard browsers

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 21:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operator_sessions",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("admin_key", sa.String(length=64), nullable=False),
        sa.Column("created_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_operator_sessions")),
    )
    op.create_index(
        op.f("ix_operator_sessions_expires_at"), "operator_sessions", ["expires_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_operator_sessions_expires_at"), table_name="operator_sessions")
    op.drop_table("operator_sessions")
