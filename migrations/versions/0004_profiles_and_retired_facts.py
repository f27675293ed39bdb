"""profiles and retired facts

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 22:12:27.689755
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("updated_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("tidy_failures", sa.Integer(), nullable=False),
        sa.Column(
            "tidy_not_before", memory.storage.models.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("tidy_after_chars", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_profiles_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_profiles")),
    )
    op.create_table(
        "retired_facts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("profile_revision", sa.Integer(), nullable=False),
        sa.Column("retired_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_retired_facts_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retired_facts")),
    )
    with op.batch_alter_table("retired_facts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_retired_facts_user_id"), ["user_id"], unique=False)

    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("facts_extracted", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.create_index(
            "ix_chunks_extract", ["facts_extracted", "status", "level"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_chunks_extract")
        batch_op.drop_column("facts_extracted")

    with op.batch_alter_table("retired_facts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_retired_facts_user_id"))

    op.drop_table("retired_facts")
    op.drop_table("profiles")
