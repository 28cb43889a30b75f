"""Record-store migrations: new stores, stores from before migrations, concurrent openers."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from bloom_frontier.pipelines.database import make_engine
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import PageRecord
from bloom_frontier.pipelines.schema import (
    HEAD,
    VERSION_TABLE,
    alembic_config,
    current_revision,
    head_revision,
)
from bloom_frontier.pipelines.tables import metadata
from bloom_frontier.pipelines.writer import StoreWriter

VERSIONS = Path(__file__).parent.parent / "pipelines" / "migrations" / "versions"


def _schema_diff(engine: sa.Engine) -> list[object]:
    with engine.connect() as connection:
        return compare_metadata(MigrationContext.configure(connection), metadata)


def _pre_migration_store(url: str) -> sa.Engine:
    """A store as the version before migrations wrote it: its tables made by create_all
    (the baseline's definitions), rows in them, no ``alembic_version``."""
    spec = importlib.util.spec_from_file_location("baseline", VERSIONS / "0001_baseline.py")
    assert spec is not None and spec.loader is not None
    baseline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(baseline)
    old = sa.MetaData()
    for name, columns in baseline._tables().items():
        sa.Table(name, old, *columns)
    engine = make_engine(url)
    old.create_all(engine)
    with engine.begin() as connection:
        connection.execute(
            old.tables["pages"].insert(),
            {
                "id": "a" * 32,
                "fetch_url": "https://e.org/old",
                "final_url": "https://e.org/old",
                "key": "r2|https://e.org/old",
                "status": 200,
                "fetched_at": 1.0,
            },
        )
    return engine


def test_one_head_and_ids_in_order() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1
    revisions = [r.revision for r in script.walk_revisions()][::-1]
    assert revisions[:3] == ["0001_baseline", "0002_content_fingerprints", "0003_shortener_answers"]


def test_new_store_is_at_head_and_matches_the_tables(store_url: str) -> None:
    store = StoreWriter.from_url(store_url)
    try:
        assert current_revision(store.database.engine) == head_revision()
        assert _schema_diff(store.database.engine) == []
    finally:
        store.close()


def test_store_from_before_migrations_upgrades_in_place(store_url: str) -> None:
    engine = _pre_migration_store(store_url)
    assert current_revision(engine) is None
    assert _schema_diff(engine) != []  # the fingerprint columns are missing
    engine.dispose()

    store = StoreWriter.from_url(store_url)
    try:
        assert current_revision(store.database.engine) == head_revision()
        assert _schema_diff(store.database.engine) == []
        (old,) = list(store.reader.pages())
        assert old["fetch_url"] == "https://e.org/old" and old["content_hash"] is None
        store.add_page(PageRecord("https://e.org/new", "https://e.org/new", None, 200))
        store.flush()
        assert [p["fetch_url"] for p in store.reader.pages()] == [
            "https://e.org/new",
            "https://e.org/old",
        ]
    finally:
        store.close()
    # Opening it again finds it up to date and changes nothing.
    again = StoreReader.from_url(store_url)
    assert len(list(again.pages())) == 2
    again.close()


def test_workers_opening_a_new_store_at_once_migrate_it_once(store_url: str) -> None:
    """Workers started together open one new store at the same moment: each one finds it
    created (or waits for the one creating it), none fails on a table another just made."""
    root = Path(__file__).parent.parent
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_STORE, store_url],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    for worker in workers:
        _out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
    engine = make_engine(store_url)
    assert current_revision(engine) == head_revision()
    assert _schema_diff(engine) == []
    engine.dispose()


def test_fingerprints_and_learned_rules_round_trip(store_url: str) -> None:
    from bloom_frontier.content.fingerprint import fingerprint
    from bloom_frontier.pipelines.records import APPLIED, PROPOSED, ParamRule

    store = StoreWriter.from_url(store_url)
    page = PageRecord("https://e.org/a?from=nav", "https://e.org/a?from=nav", "r2|x", 200)
    content = fingerprint(b"<p>hello world</p>", "<p>hello world</p>")
    # The fingerprint may be written before its page (a thread finished first): one row.
    store.add_fingerprint(page, content)
    store.flush()
    store.add_page(page)
    rule = ParamRule("e.org", "from", PROPOSED, (("https://e.org/a", "https://e.org/a?from=nav"),))
    store.add_param_rule(rule)
    store.flush()
    store.add_param_rule(ParamRule("e.org", "from", APPLIED, rule.evidence, rules_version="r2+1"))
    store.close()

    reader = StoreReader.from_url(store_url)
    (row,) = list(reader.fingerprinted_pages())
    assert (row["content_hash"], row["content_kind"]) == (content.exact, "ok")
    assert bytes(row["content_minhash"]) == content.minhash
    (stored,) = reader.param_rules()
    assert (stored.name, stored.state, stored.evidence) == ("e.org?from", APPLIED, rule.evidence)
    assert reader.param_rules(PROPOSED) == []
    reader.close()


def test_head_is_the_newest_migration() -> None:
    """:data:`HEAD` (what a new store is stamped with, and what an up-to-date one is
    recognized by without Alembic) is the head of the migration scripts."""
    assert head_revision() == HEAD


def _columns_and_indexes(engine: sa.Engine) -> dict[str, object]:
    found = sa.inspect(engine)
    return {
        table: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(table)],
            found.get_pk_constraint(table)["constrained_columns"],
            sorted((i["name"], tuple(i["column_names"])) for i in found.get_indexes(table)),
        )
        for table in sorted(found.get_table_names())
    }


def test_a_new_store_has_the_schema_the_migrations_build(store_url: str) -> None:
    """A new store is created from the tables' definitions and stamped at the head, without
    Alembic: the same tables, columns, keys and indexes as running every migration on an
    empty database."""
    store = StoreWriter.from_url(store_url)
    created = _columns_and_indexes(store.database.engine)
    store.close()
    engine = make_engine(store_url)
    with engine.begin() as connection:
        for table in [*metadata.sorted_tables[::-1], VERSION_TABLE]:
            table.drop(connection)
    assert _columns_and_indexes(engine) == {}
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    assert current_revision(engine) == HEAD
    assert _columns_and_indexes(engine) == created
    engine.dispose()


def test_a_store_whose_creation_was_interrupted_is_completed(sqlite_url: str) -> None:
    """A crash while a new store was created leaves its version table empty (the tables
    are created in the transaction that stamps it): the next opening migrates it."""
    engine = make_engine(sqlite_url)
    with engine.begin() as connection:
        VERSION_TABLE.create(connection)
    engine.dispose()
    store = StoreWriter.from_url(sqlite_url)
    try:
        assert current_revision(store.database.engine) == HEAD
        assert _schema_diff(store.database.engine) == []
    finally:
        store.close()


OPEN_STORE = """
import sys
from bloom_frontier.pipelines.writer import StoreWriter
StoreWriter.from_url(sys.argv[1]).close()
print(sorted(name for name in sys.modules if name.split(".")[0] in ("alembic", "mako")))
"""


def test_opening_a_new_or_current_store_does_not_import_alembic(sqlite_url: str) -> None:
    """Alembic (and mako, pygments) cost every crawl 0.1-0.2 CPU-s of imports: only a store
    that needs migrating loads them."""
    root = Path(__file__).parent.parent
    for _ in ("new", "current"):
        run = subprocess.run(
            [sys.executable, "-c", OPEN_STORE, sqlite_url],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        assert run.stdout.strip() == "[]", run.stdout + run.stderr
