"""Links already seen are dropped as the spider yields them (``SeenLinksMiddleware``),
before Scrapy's own spider middlewares spend anything on them, and what those middlewares
do to new links does not change: same Referer, same depth and depth limit, same URL-length
drops, same offsite counts as plain Scrapy and as the add-on without the early drop. The
``site`` spider asks before building a link's ``Request``: seen links (in any spelling the
real dedupe key merges) get none. Everything is judged from crawls of local sites, by what
the server was asked for and the crawl's stats."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from bloom_frontier.frontier import known
from bloom_frontier.frontier.known import KnownKeys
from tests.httpserver import TestServer, html
from tests.learnsite import LearnSite

ROOT = Path(__file__).resolve().parent.parent
LONG = "/" + "long" * 20  # past URLLENGTH_LIMIT below
#: No link back to the start page: plain Scrapy fetches it again (its start request is
#: ``dont_filter``, so its fingerprint is never recorded), the frontier does not.
SITE = {
    "/": html("/a", "/b", "/a", "http://offsite.example/x", LONG),
    "/a": html("/a/1", "/a/2", "/a", "/b", "http://offsite.example/x"),
    "/b": html("/b/1", "/a", "/b"),
    "/a/1": html("/a/1/deep", "/a", "/a/2"),
    "/a/2": html("/a/1", "/b"),
    "/b/1": html("/b/1/deep", "/b"),
    "/a/1/deep": html(),  # depth 3: past DEPTH_LIMIT
    "/b/1/deep": html(),
    LONG: html(),
}

#: A middleware for between Scrapy's own and the link batch: counts the requests that got
#: that far.
COUNTING = """
import json
import scrapy
from scrapy import signals


class CountingMiddleware:
    STAT = "test/past_scrapy_middlewares"

    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    async def process_spider_output(self, response, result):
        async for output in result:
            if isinstance(output, scrapy.Request):
                self.crawler.stats.inc_value(self.STAT)
            yield output
"""

#: A plain Scrapy spider, :data:`COUNTING` beside it; at the end the stats the comparison
#: needs go to a file.
SPIDER = (
    COUNTING
    + """

class LinksSpider(scrapy.Spider):
    name = "links"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, start, out, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.out = out

    def parse(self, response):
        referer = response.request.headers.get("Referer")
        yield {
            "url": response.url,
            "referer": referer.decode() if referer else None,
            "depth": response.meta.get("depth"),
        }
        for href in response.xpath("//a/@href").getall():
            yield response.follow(href, callback=self.parse)

    def closed(self, reason):
        with open(self.out, "w") as out:
            json.dump({k: v for k, v in self.crawler.stats.get_stats().items()
                       if isinstance(v, int)}, out)
"""
)


def crawl(server: TestServer, tmp: Path, name: str, *settings: str) -> tuple[list, dict]:
    """Run the spider outside the project (no scrapy.cfg); its items and stats."""
    workdir = tmp / name
    workdir.mkdir()
    (workdir / "spider.py").write_text(textwrap.dedent(SPIDER))
    items, stats = workdir / "items.jsonl", workdir / "stats.json"
    command = [
        sys.executable, "-m", "scrapy.cmdline", "runspider", "spider.py",
        "-a", f"start={server.url}/", "-a", f"out={stats}", "-o", str(items),
        "-s", "DEPTH_LIMIT=2", "-s", "URLLENGTH_LIMIT=80", "-s", "CONCURRENT_REQUESTS=1",
        "-s", "ROBOTSTXT_OBEY=False", "-s", "LOG_LEVEL=INFO", *settings,
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = items.read_text().splitlines()
    return sorted(json.loads(line).items() for line in lines), json.loads(stats.read_text())


def test_new_links_get_the_same_referer_depth_and_length_verdicts(tmp_path: Path) -> None:
    addon = ["-s", "STORE_URL=sqlite:///store.sqlite", "-s",
             'ADDONS={"bloom_frontier.Addon": 0}']  # fmt: skip
    counting = {"spider.CountingMiddleware": 600}
    early_off = {**counting, "bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware": None}
    runs = {}
    with TestServer(SITE) as server:
        for name, settings, middlewares in (
            ("plain", [], counting),
            ("addon", addon, counting),
            ("without", addon, early_off),
        ):
            middlewares_setting = f"SPIDER_MIDDLEWARES={json.dumps(middlewares)}"
            runs[name] = crawl(server, tmp_path, name, *settings, "-s", middlewares_setting)
    plain_items, plain_stats = runs["plain"]
    fetched = {urlsplit(dict(item)["url"]).path for item in plain_items}
    assert fetched == {"/", "/a", "/b", "/a/1", "/a/2", "/b/1"}  # not the deep ones, not LONG
    for name in ("addon", "without"):
        items, stats = runs[name]
        assert items == plain_items, name  # same pages, each with the same Referer and depth
        for stat in (
            "urllength/request_ignored_count",
            "request_depth_max",
            "offsite/filtered",
            "offsite/domains",
        ):
            assert stats.get(stat) == plain_stats.get(stat), (name, stat)
    addon_stats, without_stats = runs["addon"][1], runs["without"][1]
    for stat in ("seen/new", "offsite/filtered", "offsite/domains"):
        assert addon_stats.get(stat) == without_stats.get(stat), stat
    # Duplicates past the depth limit (the 5 links of the depth-2 pages to pages already
    # seen) are counted as duplicates when dropped early; DepthMiddleware drops them
    # uncounted when it sees them first.
    assert addon_stats["seen/duplicate"] == without_stats["seen/duplicate"] + 5
    assert addon_stats["dupefilter/filtered"] == addon_stats["seen/duplicate"]
    # The point: duplicates stopped before Scrapy's middlewares (and the one above the batch).
    past = "test/past_scrapy_middlewares"
    assert addon_stats[past] < without_stats[past] == plain_stats[past]


#: Between Scrapy's spider middlewares and the link batch, in the ``site`` spider's crawl:
#: counts the requests that got that far, writes the crawl's stats at the end.
PAST_SCRAPY = (
    COUNTING
    + """

class StatsToFile(CountingMiddleware):
    def __init__(self, crawler):
        super().__init__(crawler)
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    def closed(self, spider):
        with open(self.crawler.settings["TEST_STATS_FILE"], "w") as out:
            json.dump(self.crawler.stats.get_stats(), out, default=str)
"""
)

#: A page repeating its new links (``/b``'s first spelling is too long for
#: ``URLLENGTH_LIMIT``: the short one after it must still be followed).
REPEATS = {
    "/": html("/a", "/a", "/a?utm_source=x", "/b?utm_source=" + "x" * 80, "/b", "/c", "/a"),
    "/a": html("/", "/c", "/c"),
    "/b": html(),
    "/c": html(),
}


@pytest.mark.parametrize("mode", ["embedded", "shared"])
def test_a_pages_repeats_of_a_new_link_get_one_request_and_the_same_verdicts(
    tmp_path: Path, mode: str, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "past_scrapy.py").write_text(textwrap.dedent(PAST_SCRAPY))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    shared = ["-s", f"REDIS_URL={request.getfixturevalue('redis_url')}"] if mode == "shared" else []
    runs = {}
    for name, early in (("early", 1010), ("without", None)):
        middlewares = {"past_scrapy.StatsToFile": 600}
        middlewares["bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware"] = early
        stats_file = tmp_path / f"{name}.json"
        with TestServer(REPEATS) as server:
            result = subprocess.run(
                [sys.executable, "-m", "scrapy.cmdline", "crawl", "site",
                 "-a", f"start_url={server.url}/", "-s", "URLLENGTH_LIMIT=80",
                 "-s", f"SPIDER_MIDDLEWARES={json.dumps(middlewares)}",
                 "-s", f"TEST_STATS_FILE={stats_file}", "-s", f"FRONTIER_KEY_PREFIX={{{name}}}",
                 "-s", f"STORE_URL=sqlite:///{tmp_path / name}.sqlite", *shared],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-3000:]
            hits = Counter(path for path in server.paths() if path != "/robots.txt")
        runs[name] = hits, json.loads(stats_file.read_text())
    (hits, stats), (hits_without, stats_without) = runs["early"], runs["without"]
    assert hits == hits_without == Counter({"/": 1, "/a": 1, "/b": 1, "/c": 1})
    # One request per new key reached the batch: /a, /b (after its long spelling), /c.
    assert stats["test/past_scrapy_middlewares"] == 3
    assert stats_without["test/past_scrapy_middlewares"] > 3
    for stat in ("seen/duplicate", "seen/new", "urllength/request_ignored_count"):
        assert stats.get(stat) == stats_without.get(stat), stat


#: A site whose pages link to pages already fetched, plainly and in spellings the real
#: dedupe key merges (tracking parameters, fragments, host case, default port, dot segments).
VARIANTS = 6
VARIANT_SITE = {
    "/": html(*(f"/v/{n}" for n in range(VARIANTS))),
    **{
        f"/v/{n}": html(
            "/",
            f"/v/{(n + 1) % VARIANTS}",
            f"/v/{n}?utm_source=mail",
            f"/v/{(n + 2) % VARIANTS}#top",
            f"/./v/{(n + 3) % VARIANTS}",
            f"/V/../v/{(n + 4) % VARIANTS}?utm_medium=x&utm_campaign=y",
        )
        for n in range(VARIANTS)
    },
}
#: The links the pages of :data:`VARIANT_SITE` yield, and how many name a new document.
VARIANT_LINKS = VARIANTS + 6 * VARIANTS
NEW_LINKS = VARIANTS

#: The project's ``site`` spider, counting the requests it builds for links; at the end the
#: crawl's stats go to a file. Beside it a project's own spider middleware, which counts the
#: requests it sees, and a listener of Scrapy's ``request_dropped``.
COUNTING_SITE = (
    COUNTING
    + """
from bloom_frontier.spiders.site import SiteSpider


class CountingSiteSpider(SiteSpider):
    name = "counting-site"

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        if crawler.settings.getbool("TEST_LISTEN_FOR_DROPS"):
            crawler.signals.connect(spider.dropped, signal=signals.request_dropped)
        return spider

    def request_for(self, url):
        self.crawler.stats.inc_value("test/requests_built")
        return super().request_for(url)

    def dropped(self, request, spider):
        self.crawler.stats.inc_value("test/request_dropped")

    def closed(self, reason):
        with open(self.settings["TEST_STATS_FILE"], "w") as out:
            json.dump(self.crawler.stats.get_stats(), out, default=str)


class SeesRequests(CountingMiddleware):
    STAT = "test/seen_by_project_middleware"
"""
)


def crawl_counting(
    tmp_path: Path, name: str, site: dict[str, Any] | TestServer, *settings: str
) -> tuple[Counter[str], dict[str, Any]]:
    """The counting ``site`` spider over ``site`` (routes, or a server not started yet; one
    page at a time, so each page's batch is admitted before the next page is parsed), with
    the project's settings plus ``settings``; what the server was asked for, and the crawl's
    stats. The store is ``NAME.sqlite`` unless ``settings`` name one."""
    (tmp_path / "counting_site.py").write_text(textwrap.dedent(COUNTING_SITE))
    stats_file = tmp_path / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    with site if isinstance(site, TestServer) else TestServer(site) as server:
        result = subprocess.run(
            [sys.executable, "-m", "scrapy.cmdline", "runspider",
             str(tmp_path / "counting_site.py"), "-a", f"start_url={server.url}/",
             "-s", "CONCURRENT_REQUESTS=1", "-s", f"TEST_STATS_FILE={stats_file}",
             "-s", f"STORE_URL=sqlite:///{tmp_path / name}.sqlite", *settings],  # last wins
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        hits = Counter(path for path in server.paths() if path != "/robots.txt")
    return hits, json.loads(stats_file.read_text())


def spider_middlewares(middlewares: dict[str, int | None]) -> tuple[str, str]:
    return "-s", f"SPIDER_MIDDLEWARES={json.dumps(middlewares)}"


EARLY_OFF = {"bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware": None}


def test_seen_links_and_their_variants_get_no_request(tmp_path: Path) -> None:
    """Each link whose real dedupe key is seen (its page fetched, or queued by an earlier
    page) is dropped before the spider builds its ``Request``; each new one gets one; the
    drops are counted as the batch counts them. Without the early drop, the spider builds a
    request for every link and the batch drops the same ones."""
    documents = Counter({"/": 1, **{f"/v/{n}": 1 for n in range(VARIANTS)}})
    hits, stats = crawl_counting(tmp_path, "early", VARIANT_SITE)
    hits_off, stats_off = crawl_counting(
        tmp_path, "off", VARIANT_SITE, *spider_middlewares(EARLY_OFF)
    )
    assert hits == hits_off == documents
    assert stats["links/extracted"] == stats_off["links/extracted"] == VARIANT_LINKS
    assert stats["test/requests_built"] == NEW_LINKS
    assert stats_off["test/requests_built"] == VARIANT_LINKS
    duplicates = VARIANT_LINKS - NEW_LINKS
    for run in (stats, stats_off):
        assert (run["seen/duplicate"], run["dupefilter/filtered"]) == (duplicates, duplicates)
        assert run["seen/new"] == len(documents)


def test_a_listener_of_request_dropped_gets_every_dropped_link(tmp_path: Path) -> None:
    """Scrapy's ``request_dropped`` fires for each link dropped early, as the scheduler fires
    it for the requests its dupefilter refuses: a request is built for those only then."""
    hits, stats = crawl_counting(
        tmp_path, "listening", VARIANT_SITE, "-s", "TEST_LISTEN_FOR_DROPS=True"
    )
    assert set(hits) == {"/", *(f"/v/{n}" for n in range(VARIANTS))}
    assert stats["test/request_dropped"] == stats["seen/duplicate"] == VARIANT_LINKS - NEW_LINKS
    assert stats["test/requests_built"] == VARIANT_LINKS


def test_a_project_middleware_above_it_sees_every_link(tmp_path: Path) -> None:
    """A spider middleware of the project's own between the spider and the early drop
    (a higher order) must see each link the spider yields: the spider then builds a request
    for every link, and the early drop still spares Scrapy's middlewares the seen ones."""
    above = {"counting_site.SeesRequests": 1100}
    hits, stats = crawl_counting(tmp_path, "above", VARIANT_SITE, *spider_middlewares(above))
    assert set(hits) == {"/", *(f"/v/{n}" for n in range(VARIANTS))}
    assert stats["test/requests_built"] == VARIANT_LINKS
    assert stats["test/seen_by_project_middleware"] == VARIANT_LINKS
    assert stats["seen/duplicate"] == VARIANT_LINKS - NEW_LINKS


#: A page linking twice to each of two pages: in spellings a learned rule (``from``, learned
#: from :class:`LearnSite`'s content) and a built-in one (``utm_source``) merge.
LEARNED_REPEATS = {
    "/": html("/y", "/y?from=nav", "/z", "/z?utm_source=x"),
    "/y": html(),
    "/z": html(),
}


def test_a_repeat_a_learned_rule_merges_still_reaches_the_batch(tmp_path: Path) -> None:
    """A page's second spelling of a new link is dropped before its ``Request`` is built when
    a built-in rule merges it, but gets one when a learned rule does (the page's batch,
    keyed again if the rules are reloaded, must still hold it); the batch then drops it, so
    each page is fetched once either way."""
    # One store for both crawls: the second one keys with the rules the first one applied.
    shared_store = (
        "-s",
        f"STORE_URL=sqlite:///{tmp_path / 'learned.sqlite'}",
        "-s",
        "CANON_LEARN_RECHECK=0",
    )
    learning = ("-s", "CANON_LEARN=apply")
    crawl_counting(tmp_path, "learn", LearnSite(pages=12).server(), *shared_store, *learning)
    hits, stats = crawl_counting(
        tmp_path,
        "repeats",
        {"/*": lambda path: LEARNED_REPEATS.get(path.partition("?")[0])},
        *shared_store,
    )
    assert hits == Counter({"/": 1, "/y": 1, "/z": 1})
    assert stats["test/requests_built"] == 3  # /y, /y?from=nav, /z
    assert stats["seen/duplicate"] == 2


def test_known_keys_stay_bounded_forgetting_the_oldest_half() -> None:
    assert doctest.testmod(known).failed == 0
    keys = KnownKeys(capacity=1000)
    keys.update(f"k{i}" for i in range(10_000))
    remembered = [f"k{i}" for i in range(10_000) if f"k{i}" in keys]
    assert 500 <= len(remembered) <= 1000
    assert remembered == [f"k{i}" for i in range(10_000 - len(remembered), 10_000)]
