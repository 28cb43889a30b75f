"""Bounded pages (issue 24, item 6): what one page costs a worker stays bounded however the
page is made. A gzip bomb is refused before it is inflated past ``DOWNLOAD_MAXSIZE`` (the
crawl's peak memory stays small); at most ``PAGE_MAX_LINKS`` links are taken from a page,
the rest counted; a shared page whose handling outlasts its lease keeps its lease, is
fetched once, and its answer is accepted. Real crawls in a process of their own; the loop
stalls of a page of a million links are in ``tests/test_loop_stalls.py``."""

from __future__ import annotations

import gzip
import re
import time
from pathlib import Path

import pytest

from tests.bounded_pages import crawl, links_page, start_crawl
from tests.httpserver import Page, TestServer, html
from tests.servers import RedisServer

pytestmark = pytest.mark.slow

#: A body of zeros this large (decompressed), gzipped to about a thousandth of it.
BOMB_BYTES = 400 * 1024 * 1024
#: The crawl's own memory, without the bomb: a Scrapy process with the frontier (~150 MB).
MAX_PEAK_RSS_MB = 400


def slow_page(_path: str) -> Page:
    """A page without links, served in half a second."""
    time.sleep(0.5)
    return html()


def test_a_gzip_bomb_is_refused_before_it_fills_the_memory(tmp_path: Path) -> None:
    """400 MB of zeros in 400 KB of gzip: Scrapy's decompression stops at the add-on's
    DOWNLOAD_MAXSIZE (32 MiB) instead of its own 1 GiB, and the crawl goes on."""
    bomb = Page(
        gzip.compress(bytes(BOMB_BYTES), compresslevel=9),
        headers={"Content-Encoding": "gzip"},
    )
    site = {"/": html("/bomb", "/after"), "/bomb": bomb, "/after": html()}
    with TestServer(site) as server:
        done = crawl(f"{server.url}/", tmp_path)
        paths = server.paths()
    assert done.returncode == 0, done.log[-3000:]
    assert {"/", "/bomb", "/after"} <= set(paths)
    assert f"exceeded DOWNLOAD_MAXSIZE ({32 * 1024 * 1024} B) during decompression" in done.log
    print(f"peak RSS {done.peak_rss_mb} MiB")
    assert done.peak_rss_mb < MAX_PEAK_RSS_MB, done.log[-3000:]
    assert "Traceback" not in done.log, done.log[-3000:]


def test_a_projects_own_download_maxsize_wins(tmp_path: Path) -> None:
    """The add-on's limit is a default: a crawl given a larger one takes a larger page."""
    body = "<html><body>" + "x" * (40 * 1024 * 1024) + "</body></html>"
    site = {"/": html("/large"), "/large": Page(body)}
    with TestServer(site) as server:
        default = crawl(f"{server.url}/", tmp_path)
        larger = crawl(f"{server.url}/", tmp_path, f"DOWNLOAD_MAXSIZE={64 * 1024 * 1024}")
    assert "larger than download max size" in default.log, default.log[-3000:]
    assert default.stat("downloader/response_status_count/200") == 2  # robots.txt aside: "/"
    assert "larger than download max size" not in larger.log, larger.log[-3000:]
    assert larger.stat("downloader/response_status_count/200") == 3


@pytest.mark.parametrize("spider", ["site", "user_crawl"])
def test_a_page_of_many_links_gives_page_max_links_of_them(tmp_path: Path, spider: str) -> None:
    """The ``site`` spider reads no link past the cap; a user's ``CrawlSpider`` extracts them
    all, and its page's batch takes the first ``PAGE_MAX_LINKS``."""
    site = {"/": links_page(5000), "/*": lambda path: html()}
    with TestServer(site) as server:
        done = crawl(f"{server.url}/", tmp_path, "PAGE_MAX_LINKS=300", spider=spider)
        children = [path for path in server.paths() if path.startswith("/l/")]
    assert done.returncode == 0, done.log[-3000:]
    # The first 300 links of the page, in document order, each fetched once.
    assert sorted(children) == sorted(f"/l/{i}" for i in range(300))
    assert done.stat("links/over_page_cap") == 4700
    assert done.log.count("more than PAGE_MAX_LINKS") == 1, done.log[-3000:]
    assert "has 5000 links, more than PAGE_MAX_LINKS: took the first 300, left 4700" in done.log
    assert re.search(r"links rejected:\s+.*over-page-cap: 4700", done.log), done.log[-3000:]
    if spider == "site":
        assert done.stat("links/extracted") == 300


def test_a_shared_page_handled_longer_than_its_lease_is_fetched_once(tmp_path: Path) -> None:
    """A page of 60,000 links, every one admitted (no cap), on leases of 2 s: its handling
    takes several times that; its lease is kept alive meanwhile, so a second worker, started
    while the page is handled, never takes it over: the page is fetched once and its answer
    accepted. Its links are served slowly, and the crawl stops after a few hundred of them
    (CLOSESPIDER_PAGECOUNT, crawl-wide), the others left queued: both workers are still
    leasing while the page is handled."""
    links = 60_000
    site = {"/": links_page(links), "/*": slow_page}
    with RedisServer(bloom=True) as redis_server, TestServer(site) as server:
        settings = (
            f"REDIS_URL={redis_server.url}", "FRONTIER_LEASE_TTL=2", "PAGE_MAX_LINKS=0",
            "CLOSESPIDER_PAGECOUNT=300",
        )  # fmt: skip
        first = start_crawl(f"{server.url}/", tmp_path, *settings, name="first")
        deadline = time.monotonic() + 60
        while "/" not in server.paths() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = start_crawl(f"{server.url}/", tmp_path, *settings, name="second")
        done, other = first.wait(), second.wait()
        with redis_server.client() as client:
            queued = int(client.get("{site}:queued") or 0)
        fetched = server.paths().count("/")
        children = sum(path.startswith("/l/") for path in server.paths())
    for crawled in (done, other):
        assert crawled.returncode == 0, crawled.log[-3000:]
        assert "refused" not in crawled.log, crawled.log[-3000:]
        assert crawled.stat("frontier/lease_lost") is None, crawled.log[-3000:]
    assert fetched == 1, (done.log[-3000:], other.log[-3000:])
    assert done.stat("frontier/ack_refused") is None, done.log[-3000:]
    assert done.stat("frontier/enqueued") == links + 1  # and the start URL
    assert queued + children == links, (queued, children)
