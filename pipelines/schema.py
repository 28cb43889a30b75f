"""The record store's schema, brought up to date by Alembic migrations.

The migrations are package data (``pipelines/migrations``), run programmatically: users need
no ``alembic.ini``. :func:`upgrade_schema` runs when a store is opened, so a store written by
an earlier version (even one from before migrations, which has the tables but no
``alembic_version``: the baseline adopts them) upgrades in place. Several workers opening one
store at once take turns on a lock (:func:`_lock`); the migrations run in one transaction.

Alembic is imported only when a store needs migrating (0.1-0.2 CPU-s of imports at every
crawl's start otherwise): a store already at :data:`HEAD` is recognized by one query, and a
new, empty one is created as Alembic's documentation advises (``metadata.create_all``, then
stamped at the head) in one transaction.

A developer adds a revision as a new file in ``pipelines/migrations/versions/`` whose
``down_revision`` is the newest one (``script.py.mako`` is the template), and sets
:data:`HEAD` to it; revision ids, once merged, never change. ``tests/test_migrations.py``
checks that :data:`HEAD` is Alembic's head and that the migrated schema equals
:data:`bloom_frontier.pipelines.tables.metadata` on SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from bloom_frontier.pipelines.tables import metadata

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

logger = logging.getLogger(__name__)

#: Where the migrations live, as Alembic reads a package resource.
SCRIPT_LOCATION = "bloom_frontier.pipelines:migrations"
#: The newest revision of ``pipelines/migrations/versions`` (Alembic's head; tested).
HEAD = "0006_match_features"
#: Alembic's version table, as Alembic defines it.
VERSION_TABLE = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)
#: Key of the PostgreSQL advisory lock held while migrating (any constant; "bfmg").
_PG_LOCK = 0x62666D67


class SchemaError(RuntimeError):
    """The store's schema cannot be brought up to date (e.g. written by a newer version)."""


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    return config


def head_revision() -> str:
    """The newest revision this version of the code knows, as Alembic reads the scripts."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision a store is at (None: not under migrations yet, or empty)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade_schema(engine: Engine, revision: str = "head") -> None:
    """Migrate the store behind ``engine`` to ``revision`` (default: the newest)."""
    if revision == "head" and _at_head_or_created(engine):
        return
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = alembic_config()
    script = ScriptDirectory.from_config(config)
    with engine.begin() as connection:
        _lock(connection)
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


def _lock(connection: Connection) -> None:
    """Take turns with other workers opening the same store, until the transaction ends.

    PostgreSQL: an advisory lock. SQLite: the file's write lock, taken before the tables are
    looked at (``BEGIN IMMEDIATE``; Python's driver would begin only at the first INSERT,
    after the check, so two workers would both find no tables and both create them). A
    worker that finds the lock held waits up to the engine's busy timeout.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
    elif connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _at_head_or_created(engine: Engine) -> bool:
    """True if the store is at :data:`HEAD`, or had none of the store's tables and now has
    them all, stamped at :data:`HEAD`; False if Alembic has to look at it."""
    with engine.begin() as connection:
        _lock(connection)
        tables = set(inspect(connection).get_table_names())
        if VERSION_TABLE.name in tables:
            stored = connection.execute(VERSION_TABLE.select()).scalars().all()
            return stored == [HEAD]
        if tables & set(metadata.tables):
            return False  # from before migrations: the baseline adopts its tables
        # The version table and its row first: SQLite's Python driver opens the
        # transaction at the INSERT, so the tables after it are created in it, and a crash
        # leaves an empty version table beside no tables (Alembic then creates them).
        VERSION_TABLE.create(connection)
        connection.execute(VERSION_TABLE.insert(), {"version_num": HEAD})
        metadata.create_all(connection)
    logger.info("New record store, schema revision %s", HEAD)
    return True


def _known(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except Exception:  # alembic raises several types for an unknown id
        return False
