"""identities.seen_seq: how far a person has read (the web chat's unread badge)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 20:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("seen_seq", sa.BigInteger(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.drop_column("seen_seq")
