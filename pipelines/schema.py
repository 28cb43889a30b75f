"""The record store's schema, brought up to date by Alembic migrations.

The migrations are package data (``pipelines/migrations``), run programmatically: users need
no ``alembic.ini``. :func:`upgrade_schema` runs when a store is opened, so a store written by
an earlier version (even one from before migrations, which has the tables but no
``alembic_version``: the baseline adopts them) upgrades in place. Several workers opening one
PostgreSQL store at once take turns on an advisory lock; the migrations run in one transaction.

A developer adds a revision as a new file in ``pipelines/migrations/versions/`` whose
``down_revision`` is the newest one (``script.py.mako`` is the template); revision ids, once
merged, never change. ``tests/test_migrations.py`` checks that the migrated schema equals
:data:`pipelines.store.metadata` on SQLite and PostgreSQL.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

#: Where the migrations live, as Alembic reads a package resource.
SCRIPT_LOCATION = "pipelines:migrations"
#: Key of the PostgreSQL advisory lock held while migrating (any constant; "bfmg").
_PG_LOCK = 0x62666D67


class SchemaError(RuntimeError):
    """The store's schema cannot be brought up to date (e.g. written by a newer version)."""


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    return config


def head_revision() -> str:
    """The newest revision this version of the code knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision a store is at (None: not under migrations yet, or empty)."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade_schema(engine: Engine, revision: str = "head") -> None:
    """Migrate the store behind ``engine`` to ``revision`` (default: the newest)."""
    config = alembic_config()
    script = ScriptDirectory.from_config(config)
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
        current = MigrationContext.configure(connection).get_current_revision()
        if current is not None and revision == "head" and current == script.get_current_head():
            return
        if current is not None and not _known(script, current):
            raise SchemaError(
                f"the record store is at schema revision {current!r}, which this version "
                "does not know: it was written by a newer bloom-frontier; upgrade it"
            )
        config.attributes["connection"] = connection
        try:
            command.upgrade(config, revision)
        except SQLAlchemyError as exc:
            raise SchemaError(f"cannot migrate the record store: {exc}") from exc


def _known(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except Exception:  # alembic raises several types for an unknown id
        return False
