"""Match features: what migration matching reads of each 200 HTML page.

Revision ID: 0006_match_features
Revises: 0005_refused_rows

``match_features`` keeps, per page (keyed like ``pages``), its title, the headings of its
main content, the main content's exact hash and MinHash signature (boilerplate left out),
its length in words and shingles, and its links on its own host (JSON), so that
``scrapy migration-map`` works from two stores alone (bloom_frontier.content.features).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_match_features"
down_revision = "0005_refused_rows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "match_features",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("fetch_url", sa.Text, nullable=False),
        sa.Column("final_url", sa.Text, nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("headings", sa.Text, nullable=False),
        sa.Column("main_hash", sa.String(32), nullable=False),
        sa.Column("main_minhash", sa.LargeBinary, nullable=False),
        sa.Column("main_length", sa.Integer, nullable=False),
        sa.Column("main_shingles", sa.Integer, nullable=False),
        sa.Column("outlinks", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
    )
    op.create_index("ix_match_features_main_hash", "match_features", ["main_hash"])


def downgrade() -> None:
    op.drop_index("ix_match_features_main_hash", table_name="match_features")
    op.drop_table("match_features")
