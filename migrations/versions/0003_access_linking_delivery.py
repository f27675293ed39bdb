"""access policy, identity linking and delivery receipts

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 22:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import memory.storage.models

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("delivery_parts_sent", sa.Integer(), server_default="0", nullable=False)
        )

    op.create_table(
        "pairing_requests",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=False),
        sa.Column("display_name", sa.String(length=200), nullable=False),
        sa.Column("code", sa.String(length=16), nullable=False),
        sa.Column("created_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("approved_at", memory.storage.models.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pairing_requests")),
        sa.UniqueConstraint(
            "channel", "external_id", name=op.f("uq_pairing_requests_channel_external_id")
        ),
        sa.UniqueConstraint("code", name=op.f("uq_pairing_requests_code")),
    )
    op.create_table(
        "link_codes",
        sa.Column("code", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("identity_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("used_at", memory.storage.models.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["identity_id"],
            ["identities.id"],
            name=op.f("fk_link_codes_identity_id_identities"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_link_codes_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("code", name=op.f("pk_link_codes")),
    )
    op.create_table(
        "sent_parts",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("message_id", _BIG_ID, nullable=False),
        sa.Column("part", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("platform_message_id", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_at", memory.storage.models.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_sent_parts_message_id_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sent_parts")),
        sa.UniqueConstraint(
            "channel", "platform_message_id", name=op.f("uq_sent_parts_channel_platform_message_id")
        ),
        sa.UniqueConstraint("message_id", "part", name=op.f("uq_sent_parts_message_id_part")),
    )


def downgrade() -> None:
    op.drop_table("sent_parts")
    op.drop_table("link_codes")
    op.drop_table("pairing_requests")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_column("delivery_parts_sent")
