"""Alembic migrations of the record store (package data: run by
:mod:`bloom_frontier.pipelines.schema`)."""
