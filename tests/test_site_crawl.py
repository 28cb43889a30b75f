"""The embedded crawl end to end: `scrapy crawl site` against a local server, no Redis.

What is asserted is what the server saw, so nothing is taken on the crawler's word.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.httpserver import Page, TestServer, html

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]

SITE = {
    "/": html(
        "/a",
        "/a?utm_source=newsletter&utm_medium=email",
        "/a#section-2",
        "/./a",
        "//127.0.0.1:{port}/a",
        "javascript:void(0)",
        " javascript:alert(1)",
        "mailto:someone@example.com",
        "tel:+15551234",
        "data:text/html,hello",
        "",
        "   ",
        "/docs/",
        "http://other.example/offsite",
        "/with-base/page.html",
    ),
    "/a": html("/A", "/"),
    "/A": html(),
    "/docs/": html("/docs"),
    "/docs": html(),
    # Relative links resolve against <base href>, itself relative to the page URL.
    "/with-base/page.html": html("child.html", head='<base href="/elsewhere/">'),
    "/elsewhere/child.html": html("/"),
}


def crawl(server: TestServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCRAPY, "crawl", "site", "-a", f"start_url={server.url}/", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def server():
    routes = dict(SITE)
    with TestServer(routes) as srv:
        port = srv.port
        root = SITE["/"]
        srv.routes["/"] = Page(root.body.replace("{port}", str(port)))
        yield srv


def fetched(server: TestServer) -> Counter[str]:
    return Counter(path for path in server.paths() if path != "/robots.txt")


def test_each_page_fetched_once_with_base_href_and_no_junk(server: TestServer) -> None:
    result = crawl(server)
    assert result.returncode == 0, result.stderr[-3000:]
    hits = fetched(server)
    assert set(hits) == {
        "/",
        "/a",
        "/A",
        "/docs/",
        "/docs",
        "/with-base/page.html",
        "/elsewhere/child.html",
    }
    assert max(hits.values()) == 1, hits
    log = result.stderr
    assert "Crawl summary" in log
    assert "documents fetched:      7" in log
    assert "junk-scheme: 7" in log
    assert "links off the site:     1" in log


def test_jobdir_pause_and_resume_fetches_the_rest_once(server: TestServer, tmp_path) -> None:
    jobdir = str(tmp_path / "job")
    first = crawl(
        server,
        "-s",
        f"JOBDIR={jobdir}",
        "-s",
        "CLOSESPIDER_PAGECOUNT=4",
        "-s",
        "CONCURRENT_REQUESTS=1",
    )
    assert first.returncode == 0, first.stderr[-3000:]
    # robots.txt counts as a page for CLOSESPIDER_PAGECOUNT.
    assert 3 <= sum(fetched(server).values()) < 7
    second = crawl(server, "-s", f"JOBDIR={jobdir}")
    assert second.returncode == 0, second.stderr[-3000:]
    hits = fetched(server)
    assert len(hits) == 7
    # Pages in flight when the first run stopped may be fetched again; nothing else is.
    assert sum(hits.values()) <= 7 + 2, hits


def test_missing_start_url_is_a_clear_error() -> None:
    result = subprocess.run(
        [*SCRAPY, "crawl", "site"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "usage: scrapy crawl site -a start_url=" in result.stderr


def test_canon_host_rules_setting_applies_to_the_crawl() -> None:
    routes = {"/": html("/p?sid=1", "/p?sid=2", "/q?sid=1", "/q?sid=2"), "/*": lambda _: html()}
    with TestServer(routes) as server:
        result = crawl(server, "-s", 'CANON_HOST_RULES={"127.0.0.1": {"strip": ["sid"]}}')
        assert result.returncode == 0, result.stderr[-3000:]
        hits = fetched(server)
    # sid is not a global tracking parameter; the per-host rule makes it one here.
    assert sorted(hits) == ["/", "/p?sid=1", "/q?sid=1"]
