"""The page that linked to each redirect chain.

Revision ID: 0004_chain_referrer
Revises: 0003_shortener_answers

``redirect_chains`` gains ``referrer``: the ``Referer`` of the chain's first request, the page
whose link started it (the audit report's "linked from"; ``scrapy redirects`` exports it).
Chains recorded before this revision keep it empty.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_chain_referrer"
down_revision = "0003_shortener_answers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("redirect_chains") as batch:
        batch.add_column(sa.Column("referrer", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("redirect_chains") as batch:
        batch.drop_column("referrer")
