"""Alembic environment: always programmatic
(:func:`bloom_frontier.pipelines.schema.upgrade_schema`), on the connection the caller opened
and locked, inside its transaction."""

from __future__ import annotations

from alembic import context

from bloom_frontier.pipelines.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
