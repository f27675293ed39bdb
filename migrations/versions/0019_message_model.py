"""messages.model: which model wrote a reply (the main one, or a fallback)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both databases (a batch would copy `messages` on SQLite).
    op.add_column("messages", sa.Column("model", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_column("model")
