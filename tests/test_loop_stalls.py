"""Twisted's loop never waits on Redis nor on the record store: with either one hanging for
5 s in the middle of a shared crawl, the worker's loop keeps running (its longest stall,
measured by a repeating timer, stays under a second), and the crawl then finishes with every
page fetched. Nor on a page of a million links (issue 24, item 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bounded_pages import crawl, links_page
from tests.httpserver import TestServer, html
from tests.stalls import (
    EXTENSIONS,
    crawl_closing_on_a_locked_store,
    crawl_with_hang,
    lock_store,
    longest_stall_ms,
    pause_redis,
)

pytestmark = pytest.mark.slow

#: The issue's bound; bench/loop_stall.py reports the figure against its 200 ms target.
MAX_STALL_MS = 1000


@pytest.mark.parametrize("hang", [pause_redis, lock_store], ids=["redis-sigstop", "sqlite-locked"])
def test_loop_keeps_running_while_redis_or_the_store_hangs(tmp_path: Path, hang: object) -> None:
    # Pages served in 2 s: downloads are in flight when the hang begins, and must complete
    # during it.
    crawl = crawl_with_hang(tmp_path, hang, pages=40, page_delay=2.0)  # type: ignore[arg-type]
    assert crawl.returncode == 0, crawl.log[-3000:]
    assert crawl.hang_seconds >= 5
    print(f"longest stall {crawl.longest_stall_ms} ms, {crawl.served_during_hang} served in hang")
    assert 0 <= crawl.longest_stall_ms < MAX_STALL_MS, crawl.log[-3000:]
    assert crawl.every_page_fetched, sorted(crawl.expected - set(crawl.paths))
    assert crawl.responses_during_hang() >= 1, crawl.log[-3000:]
    assert "Traceback" not in crawl.log, crawl.log[-3000:]


def test_closing_waits_for_a_locked_store_off_the_loop(tmp_path: Path) -> None:
    # Every record is buffered until the spider closes, and the store is locked then: the
    # last flush waits for the lock in the store's thread while the loop keeps running, and
    # the process exits only once every record is written.
    crawl = crawl_closing_on_a_locked_store(tmp_path, held_after_closing=4.0)
    assert crawl.returncode == 0, crawl.log[-3000:]
    assert crawl.closed_while_locked, crawl.log[-3000:]
    assert crawl.expected <= crawl.paths
    print(f"longest stall {crawl.longest_stall_ms} ms, closing on a locked store included")
    assert 0 <= crawl.longest_stall_ms < MAX_STALL_MS, crawl.log[-3000:]
    pages = {path for path in crawl.expected if not path.startswith("/moved/")}  # redirected
    assert pages <= crawl.stored_paths, sorted(pages - crawl.stored_paths)
    assert "Traceback" not in crawl.log, crawl.log[-3000:]


def test_a_page_of_a_million_links_never_holds_the_loop(tmp_path: Path) -> None:
    """A page of 1,000,000 on-site links (24 MB; before: the loop blocked for over 3 minutes,
    3.1 GB): parsed in a thread, its first PAGE_MAX_LINKS (20,000) links taken and admitted
    in chunks with turns of the loop between them, the rest counted off the loop. The crawl
    stops after the page (CLOSESPIDER_PAGECOUNT: robots.txt and the page), once its links
    are admitted. Its content fingerprint is a hash of its raw bytes (above
    CONTENT_FINGERPRINT_MAX_BYTES: normalizing 24 MB would hold the interpreter, and the
    loop, for a second)."""
    site = {"/": links_page(1_000_000), "/*": lambda path: html()}
    with TestServer(site) as server:
        done = crawl(
            f"{server.url}/", tmp_path,
            f"EXTENSIONS={json.dumps(EXTENSIONS)}", "CLOSESPIDER_PAGECOUNT=2",
        )  # fmt: skip
    assert done.returncode == 0, done.log[-3000:]
    stall = longest_stall_ms(done.log)
    elapsed = float(done.log.rpartition("elapsed:")[2].split()[0])
    print(f"longest stall {stall} ms, {elapsed} s, peak RSS {done.peak_rss_mb} MiB")
    assert 0 <= stall < MAX_STALL_MS, done.log[-3000:]
    assert done.stat("links/over_page_cap") == 980_000, done.log[-3000:]
    assert done.stat("seen/new") == 20_001  # and the start URL
    assert done.stat("content/too_large") == 1, done.log[-3000:]
    assert elapsed < 60, done.log[-3000:]
    assert done.peak_rss_mb < 1500, done.log[-3000:]
    assert "Traceback" not in done.log, done.log[-3000:]
