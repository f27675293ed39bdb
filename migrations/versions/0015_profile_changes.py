"""profile_changes: who changed a profile, when, and which lines came and went

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 23:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "profile_changes",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("by", sa.String(length=100), nullable=False),
        sa.Column("added", sa.Text(), nullable=False),
        sa.Column("removed", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_profile_changes_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profile_changes")),
    )
    op.create_index(
        "ix_profile_changes_user_id_id", "profile_changes", ["user_id", "id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_profile_changes_user_id_id", table_name="profile_changes")
    op.drop_table("profile_changes")
