"""Refused rows: what the database would not take, with its reason.

Revision ID: 0005_refused_rows
Revises: 0004_chain_referrer

``refused_rows`` keeps each row the database refused (a constraint, a value its driver
cannot encode) with the writer's table it was for (``kind``), the reason and the row as
JSON, so one bad row is set aside instead of holding every other row of its batch
(pipelines/writer.py).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_refused_rows"
down_revision = "0004_chain_referrer"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "refused_rows",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("row", sa.Text, nullable=False),
        sa.Column("refused_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("refused_rows")
