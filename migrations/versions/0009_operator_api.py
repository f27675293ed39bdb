"""operator API and people's rights: idempotent POSTs, export links, erasure codes

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 17:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "idempotent_requests",
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("subject", sa.Uuid(), nullable=True),
        sa.Column(
            "claimed_until", memory.storage.models.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column("expires_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key_hash", name=op.f("pk_idempotent_requests")),
    )
    op.create_index(
        op.f("ix_idempotent_requests_expires_at"),
        "idempotent_requests",
        ["expires_at"],
        unique=False,
    )

    op.create_index(
        op.f("ix_idempotent_requests_subject"), "idempotent_requests", ["subject"], unique=False
    )
    op.create_table(
        "export_links",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("expires_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("used_at", memory.storage.models.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_export_links_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_export_links")),
    )
    op.create_index(op.f("ix_export_links_user_id"), "export_links", ["user_id"], unique=False)
    op.create_table(
        "erasure_codes",
        sa.Column("code", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("expires_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_erasure_codes_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("code", name=op.f("pk_erasure_codes")),
    )
    op.create_index(op.f("ix_erasure_codes_user_id"), "erasure_codes", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_erasure_codes_user_id"), table_name="erasure_codes")
    op.drop_table("erasure_codes")
    op.drop_index(op.f("ix_export_links_user_id"), table_name="export_links")
    op.drop_table("export_links")
    op.drop_index(op.f("ix_idempotent_requests_subject"), table_name="idempotent_requests")
    op.drop_index(op.f("ix_idempotent_requests_expires_at"), table_name="idempotent_requests")
    op.drop_table("idempotent_requests")
