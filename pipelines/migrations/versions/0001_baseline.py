"""Baseline: the record store as written by create_all before migrations existed.

Revision ID: 0001_baseline
Revises:

A store from that version has these tables and no ``alembic_version``: each table is
created only when missing, so such a store upgrades in place from here, while a new store
gets them all. The schema is spelled out (not ``metadata.create_all``) so that it stays
what it was when later revisions change the tables.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None

ID = 32  # bloom_frontier.pipelines.tables.ID_LENGTH at the time


def _tables() -> dict[str, list[sa.Column]]:
    return {
        "pages": [
            sa.Column("id", sa.String(ID), primary_key=True),
            sa.Column("fetch_url", sa.Text, nullable=False),
            sa.Column("final_url", sa.Text, nullable=False),
            sa.Column("key", sa.Text),
            sa.Column("status", sa.Integer, nullable=False),
            sa.Column("chain_id", sa.String(ID)),
            sa.Column("flag", sa.Text),
            sa.Column("fetched_at", sa.Float, nullable=False),
        ],
        "redirect_chains": [
            sa.Column("chain_id", sa.String(ID), primary_key=True),
            sa.Column("start_url", sa.Text, nullable=False),
            sa.Column("start_key", sa.Text),
            sa.Column("final_url", sa.Text),
            sa.Column("outcome", sa.String(16), nullable=False),
            sa.Column("reason", sa.Text),
            sa.Column("flag", sa.Text),
            sa.Column("hop_count", sa.Integer, nullable=False),
            sa.Column("recorded_at", sa.Float, nullable=False),
        ],
        "redirect_hops": [
            sa.Column("chain_id", sa.String(ID), primary_key=True),
            sa.Column("position", sa.Integer, primary_key=True),
            sa.Column("source_url", sa.Text, nullable=False),
            sa.Column("source_key", sa.Text),
            sa.Column("status", sa.Integer, nullable=False),
            sa.Column("permanent", sa.Boolean, nullable=False),
            sa.Column("via", sa.String(16), nullable=False),
            sa.Column("location", sa.Text, nullable=False),
            sa.Column("target_url", sa.Text),
            sa.Column("target_key", sa.Text),
            sa.Column("at", sa.Float, nullable=False),
        ],
        "canonical_hints": [
            sa.Column("id", sa.String(ID), primary_key=True),
            sa.Column("page_url", sa.Text, nullable=False),
            sa.Column("page_key", sa.Text),
            sa.Column("source", sa.String(16), nullable=False),
            sa.Column("href", sa.Text, nullable=False),
            sa.Column("canonical_url", sa.Text),
            sa.Column("canonical_key", sa.Text),
            sa.Column("valid", sa.Boolean, nullable=False),
            sa.Column("reason", sa.Text, nullable=False),
            sa.Column("seen_at", sa.Float, nullable=False),
        ],
        "url_aliases": [
            sa.Column("id", sa.String(ID), primary_key=True),
            sa.Column("url", sa.Text, nullable=False),
            sa.Column("key", sa.Text, nullable=False),
            sa.Column("rules_version", sa.String(32), nullable=False),
            sa.Column("source", sa.String(16), nullable=False),
            sa.Column("seen_at", sa.Float, nullable=False),
        ],
        "key_aliases": [
            sa.Column("id", sa.String(ID), primary_key=True),
            sa.Column("from_key", sa.Text, nullable=False),
            sa.Column("to_key", sa.Text, nullable=False),
            sa.Column("via", sa.String(16), nullable=False),
            sa.Column("rules_version", sa.String(32), nullable=False),
            sa.Column("seen_at", sa.Float, nullable=False),
        ],
    }


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    for name, columns in _tables().items():
        if name not in existing:
            op.create_table(name, *columns)


def downgrade() -> None:
    for name in reversed(list(_tables())):
        op.drop_table(name)
