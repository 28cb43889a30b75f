"""Alembic migrations of the record store (package data: run by :mod:`pipelines.schema`)."""
