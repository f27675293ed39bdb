"""usage: tokens per reply, per person (or group) per day; daily budgets

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 21:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs on both databases (a batch would copy the tables on SQLite).
    for name in ("usage_prompt", "usage_cached", "usage_completion"):
        op.add_column("messages", sa.Column(name, sa.BigInteger(), nullable=True))
    op.add_column("users", sa.Column("daily_tokens", sa.BigInteger(), nullable=True))
    op.add_column("conversations", sa.Column("budget_notice_on", sa.Date(), nullable=True))
    op.create_table(
        "usage_days",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("subject", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("group", sa.Boolean(), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("prompt", sa.BigInteger(), nullable=False),
        sa.Column("cached", sa.BigInteger(), nullable=False),
        sa.Column("completion", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "subject", "kind", "model", name=op.f("pk_usage_days")),
    )


def downgrade() -> None:
    op.drop_table("usage_days")
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.drop_column("budget_notice_on")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("daily_tokens")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        for name in ("usage_completion", "usage_cached", "usage_prompt"):
            batch_op.drop_column(name)
