"""The store never loses silently: real crawls against values a driver cannot encode, rows
the database refuses, a store that cannot be written (a full disk, its file deleted, its
``-shm`` truncated), embedded and on a shared frontier.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote_to_bytes

import psycopg
import pytest
import redis
import sqlalchemy as sa

from bloom_frontier.pipelines.database import make_engine
from bloom_frontier.pipelines.tables import hops, pages, refused_rows
from tests.conftest import PG_DSN
from tests.crawls import ROOT, SCRAPY
from tests.httpserver import Page, TestServer, html, redirect

#: Pages of the test site besides its home page and the redirect.
PAGES = [f"/p{n}" for n in range(12)]
#: A ``Location`` whose bytes are not UTF-8 (the server sends str headers as latin-1).
BAD_LOCATION = "/t\xff\xfe"


def crawl(start_url: str, store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``scrapy crawl site`` into ``store_url``, every record written as it comes."""
    return subprocess.run(
        [SCRAPY, "crawl", "site", "-a", f"start_url={start_url}",
         "-s", f"STORE_URL={store_url}", "-s", "STORE_BATCH_SIZE=1", "-s", "STATS_DUMP=True",
         *args],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def rows(store_url: str, table: sa.Table) -> list[dict[str, object]]:
    engine = make_engine(store_url)
    try:
        with engine.connect() as connection:
            return [dict(row._mapping) for row in connection.execute(sa.select(table))]
    finally:
        engine.dispose()


def site(**extra: Page | Callable[[str], Page]) -> dict[str, Page | Callable[[str], Page]]:
    """A home page linking to :data:`PAGES` (after ``/r``, which redirects to
    :data:`BAD_LOCATION`), every page a leaf."""
    return {
        "/": html("/r", *PAGES),
        "/r": redirect(BAD_LOCATION),
        **{path: html() for path in PAGES},
        "/t%FF%FE": html(),
        **extra,
    }


def test_a_location_of_undecodable_bytes_is_stored_losslessly(store_url: str) -> None:
    # One redirect whose Location is not UTF-8 emptied the store (0 of the pages kept, "finished").
    with TestServer(site()) as server:
        done = crawl(f"{server.url}/", store_url)
    assert done.returncode == 0, done.stderr[-3000:]
    stored = {row["fetch_url"] for row in rows(store_url, pages)}
    assert {f"{server.url}{path}" for path in ["/", *PAGES]} <= stored
    (hop,) = rows(store_url, hops)
    assert hop["location"] == "/t%FF%FE"
    assert unquote_to_bytes(str(hop["location"])) == BAD_LOCATION.encode("latin-1")
    assert rows(store_url, refused_rows) == []


def raise_on_pages(pg_url: str, pattern: str, errcode: str, message: str) -> str:
    """``pg_url``'s store, whose ``pages`` answer every row with a URL ``LIKE pattern`` with
    the error ``errcode`` (a trigger raising it): what the server says of a bad row, or of
    a full disk."""
    from bloom_frontier.pipelines.writer import StoreWriter

    StoreWriter.from_url(pg_url).close()
    schema = pg_url.rsplit("%3D", 1)[1]
    with psycopg.connect(PG_DSN, autocommit=True) as connection:
        connection.execute(f"""
            CREATE FUNCTION "{schema}".refuse() RETURNS trigger AS $$
            BEGIN
                IF NEW.fetch_url LIKE '{pattern}' THEN
                    RAISE EXCEPTION USING ERRCODE = '{errcode}', MESSAGE = '{message}';
                END IF;
                RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".pages
                FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse();
        """)  # fmt: skip
    return pg_url


@pytest.fixture
def poisoned_pg_store(pg_url: str) -> str:
    """A PostgreSQL store refusing (a check violation) every page with ``poison`` in it."""
    return raise_on_pages(pg_url, "%poison%", "check_violation", "poisoned")


@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_a_row_the_database_refuses_is_set_aside(
    poisoned_pg_store: str, redis_url: str, shared: bool
) -> None:
    # The batch with the refused row is written row by row: the others are kept, the bad one
    # recorded with its reason and counted; a shared page's lease is answered once that
    # is done, so the crawl drains.
    routes = site(**{"/": html("/poison", *PAGES), "/poison": html()})
    frontier = ["-s", f"REDIS_URL={redis_url}"] if shared else []
    with TestServer(routes) as server:
        done = crawl(f"{server.url}/", poisoned_pg_store, *frontier)
    assert done.returncode == 0, done.stderr[-3000:]
    stored = {row["fetch_url"] for row in rows(poisoned_pg_store, pages)}
    assert stored == {f"{server.url}{path}" for path in ["/", *PAGES]}
    # The page's row, and its content fingerprints (an update of the same row).
    refused = {str(row["kind"]): row for row in rows(poisoned_pg_store, refused_rows)}
    assert sorted(refused) == ["fingerprints", "pages"]
    for row in refused.values():
        assert "poisoned" in str(row["reason"])
        assert json.loads(str(row["row"]))["fetch_url"] == f"{server.url}/poison"
    assert "Record store refused a row of pages" in done.stderr
    assert "'store/refused/CheckViolation': 2" in done.stderr
    if shared:
        client = redis.Redis.from_url(redis_url)
        assert client.zcard("{site}:leases") == 0
        assert client.zcard("{site}:queue") == 0


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted afterwards (the tests run as root)."""
    mount = Path(f"/tmp/store-disk-{uuid.uuid4().hex[:8]}")
    mount.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        mount.rmdir()
        pytest.fail(f"cannot mount a tmpfs (the test needs root): {exc}", pytrace=False)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        shutil.rmtree(mount, ignore_errors=True)


def disk_full(store: Path) -> None:
    """Take every free byte of the disk ``store`` is on."""
    try:
        with open(store.parent / "filler", "wb") as filler:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
    except OSError:
        pass  # full


def deleted(store: Path) -> None:
    store.unlink()


def replaced(store: Path) -> None:
    store.rename(store.with_suffix(".old"))
    store.write_bytes(b"")


def shm_truncated(store: Path) -> None:
    os.truncate(f"{store}-shm", 0)


@pytest.mark.parametrize(
    ("fault", "line"),
    [
        (disk_full, "the record store cannot be written (database or disk is full)"),
        (deleted, "was deleted during the crawl"),
        (replaced, "was replaced by another file during the crawl"),
        (shm_truncated, "-shm was removed, replaced or truncated during the crawl"),
    ],
    ids=["disk-full", "deleted", "replaced", "shm-truncated"],
)
@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_a_store_that_cannot_be_written_stops_the_crawl_with_one_line(
    small_disk: Path, redis_url: str, fault: Callable[[Path], None], line: str, shared: bool
) -> None:
    # Today: a full disk retried (as "busy") with the pages' leases held, a deleted or
    # replaced file written on (every record lost), a truncated -shm: SIGBUS, rc 135.
    store = small_disk / "store.sqlite"

    def faulty(_: str) -> Page:
        # While the crawl waits for this page alone, once its earlier writes are done: a
        # -shm truncated during one of SQLite's transactions kills it before any check can.
        time.sleep(1.0)
        fault(store)
        return html()

    frontier = ["-s", f"REDIS_URL={redis_url}"] if shared else []
    with TestServer(site(**{"/p5": faulty})) as server:
        done = crawl(f"{server.url}/", f"sqlite:///{store}", "-s", "CONCURRENT_REQUESTS=1",
                     *frontier)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and line in last, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "Record store busy" not in done.stderr
    assert "finish reason:          finished" not in done.stderr
    if shared:
        # The page whose records were not committed keeps its lease, to expire: fetched again.
        client = redis.Redis.from_url(redis_url)
        assert client.zcard("{site}:leases") >= 1


def test_a_postgresql_store_out_of_disk_stops_a_shared_crawl(pg_url: str, redis_url: str) -> None:
    # PostgreSQL's "disk full" (SQLSTATE 53100) was retried as "Record store busy" forever,
    # the pages waiting with their leases held and SIGTERM ignored.
    store_url = raise_on_pages(pg_url, "%/p5", "disk_full", "could not extend file: No space")
    with TestServer(site()) as server:
        done = crawl(f"{server.url}/", store_url, "-s", f"REDIS_URL={redis_url}",
                     "-s", "CONCURRENT_REQUESTS=1")  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: the record store cannot be written (could not extend file: No space)"
    ), done.stderr[-3000:]
    assert "Record store busy" not in done.stderr
    assert redis.Redis.from_url(redis_url).zcard("{site}:leases") >= 1
