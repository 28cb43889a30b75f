"""A library's error while handling a page's links never loses them silently: the link (or
the page's canonical hints) it hit is counted and logged once with its cause, and the page's
other links are still followed. Judged from a real crawl of a local site in which keying one
link raises (as a library missing an attribute would), and so does judging one page's
canonical hint (tldextract before 5.3 has no ``top_domain_under_public_suffix``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.httpserver import TestServer, html

ROOT = Path(__file__).resolve().parent.parent

#: Every page links to /broken, whose key raises; /c names a canonical hint whose judging
#: raises. Every other page is reachable only through a page where one of these happens.
SITE = {
    "/": html("/a", "/broken", "/c"),
    "/a": html("/broken", "/a/1"),
    "/a/1": html("/broken"),
    "/c": html("/c/1", head='<link rel="canonical" href="/c-canonical">'),
    "/c/1": html(),
    "/c-canonical": html(),
    "/broken": html(),
}

#: The project's ``site`` spider in a crawl where keying any URL with ``/broken`` in it raises
#: AttributeError inside the dedupe key, and the Public Suffix List look-up of canonical hints
#: answers as tldextract 5.1 did; the crawl's stats go to a file at the end.
SPIDER = """
import json

from bloom_frontier.frontier import keys
from bloom_frontier.middlewares import canonical_hints
from bloom_frontier.spiders.site import SiteSpider

real_dedupe_key = keys.dedupe_key


def failing_dedupe_key(url, rules):
    if "/broken" in url:
        raise AttributeError("module 'lib' has no attribute 'new_helper'")
    return real_dedupe_key(url, rules)


class OldExtractResult:
    registered_domain = "localhost"


keys.dedupe_key = failing_dedupe_key
canonical_hints._extractor = lambda: lambda host: OldExtractResult()


class StatsSiteSpider(SiteSpider):
    name = "stats-site"

    def closed(self, reason):
        with open(self.settings["TEST_STATS_FILE"], "w") as out:
            json.dump(self.crawler.stats.get_stats(), out, default=str)
"""


Crawl = tuple[Counter[str], dict[str, Any], str]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    """What the server was asked for, the crawl's stats and its log."""
    tmp_path = tmp_path_factory.mktemp("link-failures")
    (tmp_path / "stats_site.py").write_text(textwrap.dedent(SPIDER))
    stats_file = tmp_path / "stats.json"
    env = {key: value for key, value in os.environ.items() if key not in {"REDIS_URL"}}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    with TestServer(SITE) as server:
        result = subprocess.run(
            [sys.executable, "-m", "scrapy.cmdline", "runspider",
             str(tmp_path / "stats_site.py"), "-a", f"start_url=http://localhost:{server.port}/",
             "-s", "CONCURRENT_REQUESTS=1", "-s", f"TEST_STATS_FILE={stats_file}",
             "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        hits = Counter(path for path in server.paths() if path != "/robots.txt")
    return hits, json.loads(stats_file.read_text()), result.stderr


def test_a_link_whose_key_raises_is_counted_logged_once_and_the_others_followed(
    crawl: Crawl,
) -> None:
    hits, stats, log = crawl
    assert hits == Counter({"/": 1, "/a": 1, "/a/1": 1, "/c": 1, "/c/1": 1})
    assert stats["dupefilter/failed/AttributeError"] == 3  # once per page linking it
    assert log.count("Cannot key") == 1
    assert "/broken" in log
    assert "AttributeError: module 'lib' has no attribute 'new_helper'" in log
    assert "Spider error processing" not in log


def test_a_page_whose_canonical_hints_raise_keeps_its_links(crawl: Crawl) -> None:
    hits, stats, log = crawl
    assert hits["/c/1"] == 1  # the page's own link, despite its hint
    assert hits["/c-canonical"] == 0  # the hint could not be judged: not followed
    assert stats["canonical/failed/AttributeError"] == 1
    assert log.count("Cannot judge the canonical hints") == 1
    assert "top_domain_under_public_suffix" in log
