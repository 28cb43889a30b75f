"""Content fingerprints on pages; parameter rules learned from content.

Revision ID: 0002_content_fingerprints
Revises: 0001_baseline

``pages`` gains the exact fingerprint of the normalized body (``content_hash``), its
MinHash signature (``content_minhash``, little-endian uint32 values), the normalization
version both were made under (``content_norm``) and what the body is for learning
(``content_kind``: ``ok``, ``empty``, ``error``, ``soft-404``). ``param_rules`` holds the
drop rules learned from content: scope, parameter, state, evidence and counter-example.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_content_fingerprints"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None

PAGE_COLUMNS = (
    ("content_hash", sa.String(32)),
    ("content_minhash", sa.LargeBinary),
    ("content_norm", sa.String(8)),
    ("content_kind", sa.String(16)),
)


def upgrade() -> None:
    with op.batch_alter_table("pages") as batch:
        for name, type_ in PAGE_COLUMNS:
            batch.add_column(sa.Column(name, type_))
    op.create_index("ix_pages_content_hash", "pages", ["content_hash"])
    op.create_table(
        "param_rules",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("param", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("evidence_count", sa.Integer, nullable=False),
        sa.Column("evidence", sa.Text, nullable=False),
        sa.Column("counter_example", sa.Text),
        sa.Column("rules_version", sa.String(32)),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("param_rules")
    op.drop_index("ix_pages_content_hash", "pages")
    with op.batch_alter_table("pages") as batch:
        for name, _ in reversed(PAGE_COLUMNS):
            batch.drop_column(name)
