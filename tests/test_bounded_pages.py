"""Bounded pages (issue 24, item 6): what one page costs a worker stays bounded however the
page is made. A gzip bomb is refused before it is inflated past ``DOWNLOAD_MAXSIZE`` (the
crawl's peak memory stays small); at most ``PAGE_MAX_LINKS`` links are taken from a page,
the rest counted; a shared page whose handling outlasts its lease keeps its lease, is
fetched once, and its answer is accepted. Real crawls in a process of their own; the loop
stalls of a page of a million links are in ``tests/test_loop_stalls.py``."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.crawls import ROOT, site_crawl_command
from tests.httpserver import Page, TestServer, html
from tests.servers import RedisServer

pytestmark = pytest.mark.slow

#: A body of zeros this large (decompressed), gzipped to about a thousandth of it.
BOMB_BYTES = 400 * 1024 * 1024
#: The crawl's own memory, without the bomb: a Scrapy process with the frontier (~150 MB).
MAX_PEAK_RSS_MB = 400


@dataclass
class Crawl:
    """A finished crawl: its exit code, log and peak resident memory (MiB)."""

    returncode: int
    log: str
    peak_rss_mb: int

    def stat(self, name: str) -> int | None:
        """The value of the stat ``name`` in Scrapy's stats dump (``STATS_DUMP``)."""
        match = re.search(rf"'{re.escape(name)}': (\d+)", self.log)
        return int(match[1]) if match else None


def crawl(start_url: str, tmp_path: Path, *settings: str) -> Crawl:
    """``scrapy crawl site`` from ``start_url`` with ``settings`` (``NAME=VALUE``), its stats
    dumped; waited for with ``wait4``, which gives that process's own peak memory."""
    options = [item for setting in ("STATS_DUMP=True", *settings) for item in ("-s", setting)]
    command = site_crawl_command(start_url, tmp_path / "store.sqlite", *options)
    log_path = tmp_path / "crawl.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            process.returncode = -1  # reaped above: Popen must not wait for it again
    return Crawl(os.waitstatus_to_exitcode(status), log_path.read_text(), usage.ru_maxrss // 1024)


def links_page(count: int) -> Page:
    """A page of ``count`` links to distinct pages of its site (``/l/<i>``)."""
    return Page("<html><body>" + "".join(f'<a href="/l/{i}">l</a>' for i in range(count)))


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


def test_a_page_of_many_links_gives_page_max_links_of_them(tmp_path: Path) -> None:
    site = {"/": links_page(5000), "/*": lambda path: html()}
    with TestServer(site) as server:
        done = crawl(f"{server.url}/", tmp_path, "PAGE_MAX_LINKS=300")
        children = [path for path in server.paths() if path.startswith("/l/")]
    assert done.returncode == 0, done.log[-3000:]
    # The first 300 links of the page, in document order, each fetched once.
    assert sorted(children) == sorted(f"/l/{i}" for i in range(300))
    assert done.stat("links/over_page_cap") == 4700
    assert done.stat("links/extracted") == 300
    assert done.log.count("more than PAGE_MAX_LINKS") == 1, done.log[-3000:]
    assert "has 5000 links, more than PAGE_MAX_LINKS: took the first 300, left 4700" in done.log


def test_a_shared_page_handled_longer_than_its_lease_is_fetched_once(tmp_path: Path) -> None:
    """A page of 60,000 links, every one admitted (no cap), on leases of 2 s: its handling
    takes several times that, its lease is kept alive meanwhile and its answer accepted,
    and no worker fetches it again. The crawl stops after the page (CLOSESPIDER_PAGECOUNT:
    robots.txt and the page), its links left queued."""
    links = 60_000
    site = {"/": links_page(links), "/*": lambda path: html()}
    with RedisServer(bloom=True) as redis_server, TestServer(site) as server:
        done = crawl(
            f"{server.url}/", tmp_path,
            f"REDIS_URL={redis_server.url}", "FRONTIER_LEASE_TTL=2", "PAGE_MAX_LINKS=0",
            "CLOSESPIDER_PAGECOUNT=2", "LOG_LEVEL=DEBUG",
        )  # fmt: skip
        with redis_server.client() as client:
            queued = int(client.get("{site}:queued") or 0)
        fetched = server.paths().count("/")
        children = sum(path.startswith("/l/") for path in server.paths())
    assert done.returncode == 0, done.log[-3000:]
    assert fetched == 1, done.log[-3000:]
    assert "refused" not in done.log, done.log[-3000:]
    assert done.stat("frontier/lease_lost") is None, done.log[-3000:]
    assert done.stat("frontier/acked") == 1, done.log[-3000:]
    assert done.stat("frontier/enqueued") == links + 1  # and the start URL
    assert queued + children == links, (queued, children)
