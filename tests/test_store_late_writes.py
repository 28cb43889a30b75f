"""A record made after the record store closed (a fingerprint still in its thread when the
crawl closes) is written, not taken for a damaged SQLite file.

SQLite removes the ``-shm`` when the store's last connection closes; the store watches that
file for tampering (:meth:`~bloom_frontier.pipelines.database.Database.check_file`), so a
write after closing once failed with "the record store's shared-memory file ... was
removed" and stopped every one-page crawl whose fingerprint came late.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import PageRecord
from bloom_frontier.pipelines.writer import StoreWriter
from tests.crawls import ROOT

FIRST, LATE = "https://e.org/first", "https://e.org/late"

# The same sequence on Twisted's running loop, where writes go through the store's thread.
_ON_THE_LOOP = """
import sys
from twisted.internet import task
from twisted.internet.defer import ensureDeferred
from bloom_frontier.pipelines.records import PageRecord
from bloom_frontier.pipelines.writer import StoreWriter

async def main(reactor):
    await task.deferLater(reactor, 0)  # the loop running
    store = StoreWriter.from_url(sys.argv[1], flush_interval=3600)
    store.add_page(PageRecord(sys.argv[2], sys.argv[2], "k1", 200, None, None, 1.0))
    await store.close()
    store.add_page(PageRecord(sys.argv[3], sys.argv[3], "k2", 200, None, None, 2.0))
    await store.commit_all()
    await task.deferLater(reactor, 0.2)  # the connections released after the late write
    print("failure:", store.failure)

task.react(lambda reactor: ensureDeferred(main(reactor)))
"""


def stored_pages(url: str) -> set[str]:
    reader = StoreReader.from_url(url)
    try:
        return {page["fetch_url"] for page in reader.pages()}
    finally:
        reader.close()


def test_a_record_made_after_the_store_closed_is_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.sqlite"
    store = StoreWriter.from_url(url, flush_interval=3600)
    store.add_page(PageRecord(FIRST, FIRST, "k1", 200, None, None, 1.0))
    store.close()
    assert not (tmp_path / "store.sqlite-shm").exists()  # SQLite's own clean-up
    store.add_page(PageRecord(LATE, LATE, "k2", 200, None, None, 2.0))
    assert store.failure is None
    assert stored_pages(url) == {FIRST, LATE}
    assert not (tmp_path / "store.sqlite-shm").exists()  # released again


def test_a_record_made_after_the_store_closed_on_the_loop_is_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.sqlite"
    run = subprocess.run(
        [sys.executable, "-c", _ON_THE_LOOP, url, FIRST, LATE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "failure: None" in run.stdout
    assert stored_pages(url) == {FIRST, LATE}
    assert not (tmp_path / "store.sqlite-shm").exists()
