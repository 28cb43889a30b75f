"""Shortener answers: where each short link pointed, and when.

Revision ID: 0003_shortener_answers
Revises: 0002_content_fingerprints

``shortener_answers`` caches what a link shortener (bit.ly, t.co, ...) answered for a short
URL (status and ``Location``) with the time of the answer, so each short link is asked once
per ``SHORTENER_CACHE_TTL`` across workers and crawls (middlewares/shorteners.py).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_shortener_answers"
down_revision = "0002_content_fingerprints"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shortener_answers",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("short_url", sa.Text, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("location", sa.Text),
        sa.Column("answered_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("shortener_answers")
