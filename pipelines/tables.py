"""The record store's tables: one schema for SQLite and PostgreSQL (SQLAlchemy Core).

Every row's primary key is a hash of its natural key (:func:`record_id`), so an upsert of the
same record twice (a retried flush, two workers recording one page) leaves one row. The
migrations in ``pipelines/migrations`` build exactly this schema (``tests/test_migrations.py``).
"""

from __future__ import annotations

import hashlib

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

#: Length of the hashed primary keys (:func:`record_id`).
ID_LENGTH = 32

metadata = MetaData()


def _id_column() -> Column[str]:
    return Column("id", String(ID_LENGTH), primary_key=True)


pages = Table(
    "pages",
    metadata,
    _id_column(),  # hash of fetch_url
    Column("fetch_url", Text, nullable=False),
    Column("final_url", Text, nullable=False),
    Column("key", Text),
    Column("status", Integer, nullable=False),
    Column("chain_id", String(ID_LENGTH)),
    Column("flag", Text),
    Column("fetched_at", Float, nullable=False),
    # Content fingerprints (bloom_frontier.content): revision 0002_content_fingerprints.
    Column("content_hash", String(32)),
    Column("content_minhash", LargeBinary),
    Column("content_norm", String(8)),
    Column("content_kind", String(16)),
    Index("ix_pages_content_hash", "content_hash"),
)

chains = Table(
    "redirect_chains",
    metadata,
    Column("chain_id", String(ID_LENGTH), primary_key=True),
    Column("start_url", Text, nullable=False),
    Column("start_key", Text),
    Column("final_url", Text),
    Column("outcome", String(16), nullable=False),
    Column("reason", Text),
    Column("flag", Text),
    Column("hop_count", Integer, nullable=False),
    Column("recorded_at", Float, nullable=False),
    # The page whose link started the chain (revision 0004_chain_referrer).
    Column("referrer", Text),
)

hops = Table(
    "redirect_hops",
    metadata,
    Column("chain_id", String(ID_LENGTH), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("source_url", Text, nullable=False),
    Column("source_key", Text),
    Column("status", Integer, nullable=False),
    Column("permanent", Boolean, nullable=False),
    Column("via", String(16), nullable=False),
    Column("location", Text, nullable=False),
    Column("target_url", Text),
    Column("target_key", Text),
    Column("at", Float, nullable=False),
)

canonical_hints = Table(
    "canonical_hints",
    metadata,
    _id_column(),  # hash of page_url, source, href
    Column("page_url", Text, nullable=False),
    Column("page_key", Text),
    Column("source", String(16), nullable=False),
    Column("href", Text, nullable=False),
    Column("canonical_url", Text),
    Column("canonical_key", Text),
    Column("valid", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("seen_at", Float, nullable=False),
)

url_aliases = Table(
    "url_aliases",
    metadata,
    _id_column(),  # hash of url, rules_version
    Column("url", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("rules_version", String(32), nullable=False),
    Column("source", String(16), nullable=False),
    Column("seen_at", Float, nullable=False),
)

key_aliases = Table(
    "key_aliases",
    metadata,
    _id_column(),  # hash of from_key, to_key
    Column("from_key", Text, nullable=False),
    Column("to_key", Text, nullable=False),
    Column("via", String(16), nullable=False),
    Column("rules_version", String(32), nullable=False),
    Column("seen_at", Float, nullable=False),
)

#: Parameter drop rules learned from content (bloom_frontier.learning), with their evidence (JSON).
param_rules = Table(
    "param_rules",
    metadata,
    _id_column(),  # hash of scope, param
    Column("scope", Text, nullable=False),
    Column("param", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("evidence_count", Integer, nullable=False),
    Column("evidence", Text, nullable=False),
    Column("counter_example", Text),
    Column("rules_version", String(32)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

#: Shortener answers (bloom_frontier.middlewares.shorteners): where a short link pointed, and
#: when that was answered (revision 0003_shortener_answers).
shortener_answers = Table(
    "shortener_answers",
    metadata,
    _id_column(),  # hash of short_url
    Column("short_url", Text, nullable=False),
    Column("status", Integer, nullable=False),
    Column("location", Text),
    Column("answered_at", Float, nullable=False),
)

#: Rows the database refused (bloom_frontier.pipelines.writer): the writer's table they
#: were for (``kind``), the database's reason, the row as JSON (revision 0005_refused_rows).
refused_rows = Table(
    "refused_rows",
    metadata,
    _id_column(),  # hash of kind, row
    Column("kind", String(32), nullable=False),
    Column("reason", Text, nullable=False),
    Column("row", Text, nullable=False),
    Column("refused_at", Float, nullable=False),
)


#: What migration matching reads of each 200 HTML page (bloom_frontier.content.features),
#: keyed like its ``pages`` row; ``headings`` and ``outlinks`` are JSON lists (revision
#: 0006_match_features).
match_features = Table(
    "match_features",
    metadata,
    _id_column(),  # hash of fetch_url, as pages.id
    Column("fetch_url", Text, nullable=False),
    Column("final_url", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("headings", Text, nullable=False),
    Column("main_hash", String(32), nullable=False),
    Column("main_minhash", LargeBinary, nullable=False),
    Column("main_length", Integer, nullable=False),
    Column("main_shingles", Integer, nullable=False),
    Column("outlinks", Text, nullable=False),
    Column("recorded_at", Float, nullable=False),
    Index("ix_match_features_main_hash", "main_hash"),
)


def record_id(*parts: str | None) -> str:
    """Stable primary key for a natural key of (possibly very long) URLs."""
    text = "\x1f".join(part or "" for part in parts)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:ID_LENGTH]
