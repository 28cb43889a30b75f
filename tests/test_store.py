"""The record store on both engines: SQLite and the real PostgreSQL (database ``test``)."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from bloom_frontier.pipelines.database import (
    DEFAULT_STORE_URL,
    Database,
    StoreMissing,
    normalize_store_url,
)
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import (
    FETCHED,
    LOOP,
    SEEN,
    CanonicalHint,
    KeyAlias,
    PageRecord,
    UrlAlias,
)
from bloom_frontier.pipelines.writer import StoreWriter
from tests.record_builders import A, B, C, chain, hop


def count(store: StoreReader) -> dict[str, int]:
    return {
        "chains": len(store.chains()),
        "hops": sum(len(c.hops) for c in store.chains()),
        "pages": len(list(store.pages())),
        "hints": len(list(store.hints())),
        "aliases": len(list(store.url_aliases())),
        "key_aliases": len(list(store.key_aliases())),
    }


def write_everything(store: StoreWriter) -> None:
    store.add_chain(chain("c1", FETCHED, hop(A, B, 301), hop(B, C, 302)))
    store.add_page(PageRecord(A, C, f"r1|{C}", 200, "c1", None, 2.0))
    store.add_hints(
        [CanonicalHint(C, f"r1|{C}", "link-element", "/c", C, f"r1|{C}", True, "self", 3.0)]
    )
    store.add_url_aliases([UrlAlias(url, f"r1|{url}", "r1", "redirect", 4.0) for url in (A, B, C)])
    store.add_key_alias(KeyAlias(f"r1|{B}", f"r1|{C}", "canonical", "r1", 5.0))


def test_records_round_trip(store_url: str) -> None:
    store = StoreWriter.from_url(store_url)
    write_everything(store)
    store.close()
    reader = StoreReader.from_url(store_url)
    [stored] = reader.chains()
    assert (stored.start_url, stored.final_url, stored.outcome, stored.hop_count) == (
        A,
        C,
        FETCHED,
        2,
    )
    assert [
        (h.position, h.source_url, h.status, h.permanent, h.target_url) for h in stored.hops
    ] == [
        (0, A, 301, True, B),
        (1, B, 302, False, C),
    ]
    [page] = reader.pages()
    assert (page["fetch_url"], page["final_url"], page["status"], page["chain_id"]) == (
        A,
        C,
        200,
        "c1",
    )
    [hint] = reader.hints()
    assert (hint["page_url"], hint["canonical_url"], hint["valid"], hint["reason"]) == (
        C,
        C,
        True,
        "self",
    )
    assert sorted(a["url"] for a in reader.url_aliases("r1")) == [A, B, C]
    assert list(reader.url_aliases("r0")) == []
    assert reader.rules_versions() == ["r1"]
    [alias] = reader.key_aliases()
    assert (alias["from_key"], alias["to_key"]) == (f"r1|{B}", f"r1|{C}")
    reader.close()


def test_writes_are_idempotent(store_url: str) -> None:
    for _ in range(2):  # two workers (or a retried flush) writing the same records
        store = StoreWriter.from_url(store_url)
        write_everything(store)
        store.flush()
        write_everything(store)  # and the same rows twice in one batch
        store.close()
    reader = StoreReader.from_url(store_url)
    assert count(reader) == {
        "chains": 1,
        "hops": 2,
        "pages": 1,
        "hints": 1,
        "aliases": 3,
        "key_aliases": 1,
    }
    reader.close()


def test_a_chain_only_moves_forward(store_url: str) -> None:
    store = StoreWriter.from_url(store_url, batch_size=1)
    reader = StoreReader.from_url(store_url)

    def state() -> tuple[str, int]:
        [stored] = reader.chains()
        return stored.outcome, stored.hop_count

    store.add_chain(chain("c1", SEEN, hop(A, B)))
    assert state() == (SEEN, 1)
    store.add_chain(chain("c1", FETCHED, hop(A, B)))  # the worker that fetched B reports
    assert state() == (FETCHED, 1)
    store.add_chain(chain("c1", SEEN, hop(A, B)))  # a late "seen" does not undo it
    assert state() == (FETCHED, 1)
    store.add_chain(chain("c1", LOOP, hop(A, B), hop(B, A)))
    assert state() == (LOOP, 2)
    store.add_chain(chain("c1", FETCHED, hop(A, B)))  # an older, shorter state
    assert state() == (LOOP, 2)
    store.close()
    reader.close()


def test_writes_are_batched(store_url: str) -> None:
    store = StoreWriter.from_url(store_url, batch_size=3, flush_interval=3600)
    reader = StoreReader.from_url(store_url)
    store.add_page(PageRecord(A, A, None, 200))
    store.add_page(PageRecord(B, B, None, 200))
    assert list(reader.pages()) == []
    store.add_page(PageRecord(C, C, None, 200))
    assert len(list(reader.pages())) == 3
    store.add_page(PageRecord(A, B, None, 404))  # a refetch: the newer answer wins
    assert {p["fetch_url"]: p["status"] for p in reader.pages()}[A] == 200
    store.close()
    assert {p["fetch_url"]: p["status"] for p in reader.pages()}[A] == 404
    reader.close()


def test_flush_interval_bounds_what_a_crash_can_lose(store_url: str) -> None:
    store = StoreWriter.from_url(store_url, batch_size=1000, flush_interval=0)
    store.add_page(PageRecord(A, A, None, 200))
    reader = StoreReader.from_url(store_url)
    assert len(list(reader.pages())) == 1
    store.close()
    reader.close()


def test_urls_longer_than_an_index_entry(store_url: str) -> None:
    long_url = "https://e.org/" + "x" * 12000
    store = StoreWriter.from_url(store_url)
    store.add_page(PageRecord(long_url, long_url, f"r1|{long_url}", 200))
    store.add_url_aliases([UrlAlias(long_url, f"r1|{long_url}", "r1", "fetched")])
    store.close()
    reader = StoreReader.from_url(store_url)
    assert [p["fetch_url"] for p in reader.pages()] == [long_url]
    reader.close()


def _worker(store_url: str, worker: int) -> int:
    """One crawl worker: pages 0..299 (all workers overlap), 50 per batch, plus its own."""
    store = StoreWriter.from_url(store_url, batch_size=50)
    for n in range(300):
        url = f"https://e.org/p/{(n * 7 + worker * 13) % 300}"
        store.add_page(PageRecord(url, url, f"r1|{url}", 200))
        store.add_url_aliases([UrlAlias(url, f"r1|{url}", "r1", "fetched")])
    store.add_page(PageRecord(f"https://e.org/own/{worker}", "x", None, 200))
    store.close()
    return worker


def test_concurrent_workers_write_one_store(store_url: str) -> None:
    StoreWriter.from_url(store_url).close()  # the schema, created once
    with ProcessPoolExecutor(max_workers=4) as pool:
        assert sorted(pool.map(_worker, [store_url] * 4, range(4))) == [0, 1, 2, 3]
    reader = StoreReader.from_url(store_url)
    assert len(list(reader.pages())) == 300 + 4
    assert len(list(reader.url_aliases())) == 300
    reader.close()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (None, DEFAULT_STORE_URL),
        ("", DEFAULT_STORE_URL),
        ("postgresql://u@db:5432/crawl", "postgresql+psycopg://u@db:5432/crawl"),
        ("postgres://u@db/crawl", "postgresql+psycopg://u@db/crawl"),
        ("postgresql+psycopg://u@db/crawl", "postgresql+psycopg://u@db/crawl"),
        ("sqlite:////var/lib/crawl.sqlite", "sqlite:////var/lib/crawl.sqlite"),
    ],
)
def test_store_url_normalization(url: str | None, expected: str) -> None:
    assert normalize_store_url(url) == expected


def test_default_store_is_a_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = StoreWriter.from_settings(Settings())
    store.add_page(PageRecord(A, A, None, 200))
    store.close()
    assert (tmp_path / "crawl.sqlite").is_file()


def test_reading_a_missing_store_is_an_error(tmp_path: Path) -> None:
    settings = Settings({"STORE_URL": f"sqlite:///{tmp_path / 'nothing.sqlite'}"})
    with pytest.raises(StoreMissing, match=r"nothing\.sqlite"):
        StoreReader.for_reading(settings)
    assert not (tmp_path / "nothing.sqlite").exists()


def test_records_wait_in_memory_while_the_database_is_locked(tmp_path: Path) -> None:
    store, blocker = locked_store(tmp_path / "store.sqlite", batch_size=1, flush_interval=0.2)
    store.add_page(PageRecord(A, A, None, 200))  # the flush fails: kept, no exception
    store.add_page(PageRecord(B, B, None, 200))  # within the retry delay: only buffered
    blocker.execute("ROLLBACK")
    blocker.close()
    time.sleep(0.25)
    store.add_page(PageRecord(C, C, None, 200))  # retried: everything lands
    assert sorted(p["fetch_url"] for p in store.reader.pages()) == [A, B, C]
    store.close()


def locked_store(path: Path, **kwargs: float) -> tuple[StoreWriter, sqlite3.Connection]:
    """A store on ``path`` that waits 0.05 s for a lock, and a connection holding the file's
    write lock (as another process would) until it rolls back."""
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    store = StoreWriter(Database(engine), **kwargs)
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN EXCLUSIVE")
    return store, blocker


def test_the_last_flush_waits_for_a_database_locked_longer_than_a_flush_retries(
    tmp_path: Path,
) -> None:
    store, blocker = locked_store(tmp_path / "store.sqlite", batch_size=100, flush_interval=0.1)
    store.add_page(PageRecord(A, A, None, 200))
    store.add_page(PageRecord(B, B, None, 200))
    with pytest.raises(OperationalError):
        store.flush()  # one flush's retries (about 1.7 s) give up on a 3 s lock
    threading.Timer(3.0, blocker.execute, ("ROLLBACK",)).start()
    failures: list[Failure] = []
    store.commit_all().addErrback(failures.append)  # blocks here: no background thread
    assert failures == []
    assert sorted(p["fetch_url"] for p in store.reader.pages()) == [A, B]
    blocker.close()
    store.close()


def test_the_last_flush_gives_up_after_close_timeout_keeping_the_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, blocker = locked_store(
        tmp_path / "store.sqlite", batch_size=100, flush_interval=0.1, close_timeout=0.5
    )
    store.add_page(PageRecord(A, A, None, 200))
    failures: list[Failure] = []
    store.commit_all().addErrback(failures.append)
    assert failures == []  # a logged line, not a traceback
    assert "Record store unavailable, 1 records not written" in caplog.text
    blocker.execute("ROLLBACK")
    blocker.close()
    store.flush()  # the records were kept for a later flush
    assert [p["fetch_url"] for p in store.reader.pages()] == [A]
    store.close()


def test_a_shared_crawls_page_waits_for_its_records_however_long_the_database_is_away(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Its lease is released after this fires: firing with the records only in memory (as
    # the last flush does past close_timeout) would lose them to a kill.
    store, blocker = locked_store(
        tmp_path / "store.sqlite", batch_size=100, flush_interval=0.1, close_timeout=0.3
    )
    store.add_page(PageRecord(A, A, None, 200))
    threading.Timer(2.0, blocker.execute, ("ROLLBACK",)).start()
    failures: list[Failure] = []
    store.commit_page().addErrback(failures.append)  # blocks here: no background thread
    assert failures == []
    assert "records wait to be written" in caplog.text
    assert "records not written" not in caplog.text
    assert [p["fetch_url"] for p in store.reader.pages()] == [A]
    blocker.close()
    store.close()


class StepThread:
    """A store's background thread run by hand: each call waits until :meth:`step`."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, tuple[Any, ...], Deferred[Any]]] = []

    def run(self, function: Any, *args: Any) -> Deferred[Any]:
        done: Deferred[Any] = Deferred()
        self.calls.append((function, args, done))
        return done

    def step(self) -> None:
        function, args, done = self.calls.pop(0)
        done.callback(function(*args))


def test_pages_handled_during_a_commit_share_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = StepThread()
    monkeypatch.setattr(StoreWriter, "_thread", property(lambda _: thread))
    store = StoreWriter.from_url(f"sqlite:///{tmp_path / 'store.sqlite'}")
    fired: list[str] = []
    store.add_page(PageRecord(A, A, None, 200))
    store.commit_page().addCallback(lambda _: fired.append(A))
    for url in (B, C):  # handled while A's commit is under way
        store.add_page(PageRecord(url, url, None, 200))
        store.commit_page().addCallback(lambda _, url=url: fired.append(url))
    assert len(thread.calls) == 1 and fired == []
    thread.step()
    assert fired == [A]  # only once its records are in
    assert [p["fetch_url"] for p in store.reader.pages()] == [A]
    assert len(thread.calls) == 1  # one transaction for both
    thread.step()
    assert fired == [A, B, C]
    assert sorted(p["fetch_url"] for p in store.reader.pages()) == sorted([A, B, C])
    assert thread.calls == []
    # The next page, with no commit under way, gets its own at once.
    store.add_page(PageRecord(A + "x", A + "x", None, 200))
    store.commit_page()
    assert len(thread.calls) == 1


def test_a_crawls_store_touches_its_database_first_from_its_own_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crawl builds its store on Twisted's loop: making the store and buffering a page must not
    # open the database there, not even to bring its schema up to date.
    thread = StepThread()
    monkeypatch.setattr(StoreWriter, "_thread", property(lambda _: thread))
    path = tmp_path / "store.sqlite"
    store = StoreWriter.from_settings(Settings({"STORE_URL": f"sqlite:///{path}"}))
    store.add_page(PageRecord(A, A, None, 200))
    store.commit_page()
    assert not path.exists()
    thread.step()
    assert [p["fetch_url"] for p in store.reader.pages()] == [A]
