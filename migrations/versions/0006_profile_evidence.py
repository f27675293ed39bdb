"""profile evidence: the typed messages behind each fact, and facts refused without

Existing lines get no evidence ("unknown"): nothing is invented for them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 10:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.add_column(sa.Column("evidence", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("facts_refused", sa.Integer(), server_default="0", nullable=False)
        )
    with op.batch_alter_table("retired_facts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("evidence", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("retired_facts", schema=None) as batch_op:
        batch_op.drop_column("evidence")
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.drop_column("facts_refused")
        batch_op.drop_column("evidence")
