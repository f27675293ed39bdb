"""watermarks: how far each platform chat's history has been read (Discord backfill)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "watermarks",
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("place", sa.String(length=200), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("private", sa.Boolean(), nullable=False),
        sa.Column("updated_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("channel", "place"),
    )
    op.create_index("ix_watermarks_updated_at", "watermarks", ["updated_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_watermarks_updated_at", table_name="watermarks")
    op.drop_table("watermarks")
