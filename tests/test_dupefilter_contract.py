"""Scrapy's dupefilter contract (adapted from Scrapy's ``tests/test_dupefilters.py``), for the
embedded frontier and the shared one, plus the Scrapy conventions the frontier honours on
the way in: ``request_dropped``, ``allowed_domains``, non-GET keys.

Intended deviations from Scrapy's ``RFPDupeFilter``, each asserted below:

- "seen before?" is decided on the request's dedupe key, not on
  ``REQUEST_FINGERPRINTER_CLASS``'s fingerprint: a fingerprinter that folds case does not
  merge ``/index.html`` and ``/INDEX.html``; tracking parameters are dropped instead.
- Duplicates are counted (``dupefilter/filtered``) when ``request_seen`` answers, because
  most of them never reach it (a page's links are checked as one batch); ``log()`` counts
  nothing more.
- The embedded filter is saved to ``JOBDIR`` when the spider closes, not on the
  dupefilter's ``close()``: the dupefilter shares the frontier with the batch middleware.
- Shared mode: ``request_seen`` only checks; the shared scheduler marks a key seen and
  queues the request in one atomic step (``RedisFrontier.enqueue``) and never asks the
  dupefilter. So the contract is checked here as Scrapy's scheduler exercises it: ask, then
  enqueue what was new (:func:`offer`). The verdict is the crawl's (all workers'): a second
  worker's dupefilter sees what the first one enqueued. Duplicates counted by the shared
  scheduler are tested with it (tests/test_scheduler_contract.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from scrapy import Request, Spider, signals
from scrapy.core.engine import ExecutionEngine
from scrapy.core.scheduler import Scheduler
from scrapy.http import HtmlResponse
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from bloom_frontier.dupefilter import BloomDupeFilter
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.middlewares.linkbatch import BatchDedupeMiddleware

ADDONS = {"bloom_frontier.Addon": 0}


class ContractSpider(Spider):
    name = "contract"
    allowed_domains: ClassVar[list[str]] = ["scrapytest.org"]


@pytest.fixture(params=["embedded", "shared"])
def mode(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The settings of each mode (shared: the test's emptied RedisBloom server)."""
    if request.param == "shared":
        return {"REDIS_URL": request.getfixturevalue("redis_url")}
    return {}


def make_crawler(mode: dict[str, Any], **settings: Any) -> Any:
    crawler = get_crawler(ContractSpider, {"ADDONS": ADDONS, **mode, **settings})
    crawler.spider = ContractSpider.from_crawler(crawler)
    return crawler


def with_engine(crawler: Any) -> Any:
    """``crawler`` with its engine (downloader and its middlewares), not started."""
    crawler.engine = ExecutionEngine(crawler, lambda _: None)
    return crawler


def dupefilter_of(crawler: Any) -> BloomDupeFilter:
    """The dupefilter as Scrapy's scheduler builds it (``DUPEFILTER_CLASS``)."""
    dupefilter = build_from_crawler(Scheduler, crawler).df
    assert isinstance(dupefilter, BloomDupeFilter)
    dupefilter.open()
    return dupefilter


def offer(dupefilter: BloomDupeFilter, request: Request) -> bool:
    """What the crawl's scheduler does with ``request``: True if a duplicate; else it is
    scheduled (the shared frontier marks its key seen then, the embedded one already did)."""
    seen = dupefilter.request_seen(request)
    frontier = dupefilter.frontier
    if not seen and isinstance(frontier, RedisFrontier):
        assert frontier.enqueue(request.copy())  # (a copy: the queued one is marked queued)
    return seen


def close(crawler: Any, dupefilter: BloomDupeFilter) -> None:
    dupefilter.close("finished")
    crawler.signals.send_catch_log(signals.spider_closed, spider=crawler.spider, reason="done")


def test_filter(mode: dict[str, Any]) -> None:
    crawler = make_crawler(mode)
    dupefilter = dupefilter_of(crawler)
    r1 = Request("http://scrapytest.org/1")
    r2 = Request("http://scrapytest.org/2")
    r3 = Request("http://scrapytest.org/2")
    assert not offer(dupefilter, r1)
    assert offer(dupefilter, r1)
    assert not offer(dupefilter, r2)
    assert offer(dupefilter, r3)
    close(crawler, dupefilter)


def test_seen_requests_outlive_the_dupefilter(mode: dict[str, Any], tmp_path: Path) -> None:
    """Scrapy's ``test_dupefilter_path``: with ``JOBDIR`` (embedded) or in Redis (shared,
    another worker), a new dupefilter knows what the first one saw."""
    settings = {"JOBDIR": str(tmp_path / "job")} if not mode else {}
    r1 = Request("http://scrapytest.org/1")
    r2 = Request("http://scrapytest.org/2")
    first = make_crawler(mode, **settings)
    dupefilter = dupefilter_of(first)
    assert not offer(dupefilter, r1)
    assert offer(dupefilter, r1)
    close(first, dupefilter)
    second = make_crawler(mode, **settings)
    other = dupefilter_of(second)
    assert other is not dupefilter
    assert offer(other, r1)
    assert not offer(other, r2)
    assert offer(other, r2)
    close(second, other)


def test_keys_not_fingerprints(mode: dict[str, Any]) -> None:
    """Scrapy's ``test_request_fingerprint``, adapted (a deviation, see the docstring)."""

    class CaseInsensitiveFingerprinter:
        def fingerprint(self, request: Request) -> bytes:
            return request.url.lower().encode()

    crawler = make_crawler(mode, REQUEST_FINGERPRINTER_CLASS=CaseInsensitiveFingerprinter)
    dupefilter = dupefilter_of(crawler)
    assert not offer(dupefilter, Request("http://scrapytest.org/index.html"))
    assert not offer(dupefilter, Request("http://scrapytest.org/INDEX.html"))
    # What the key folds instead: host case, default port, tracking parameters, fragments.
    assert offer(dupefilter, Request("http://SCRAPYTEST.org:80/index.html#top"))
    assert offer(dupefilter, Request("http://scrapytest.org/index.html?utm_source=x"))
    close(crawler, dupefilter)


def test_non_get_requests_are_keyed_on_method_and_body(mode: dict[str, Any]) -> None:
    crawler = make_crawler(mode)
    dupefilter = dupefilter_of(crawler)
    url = "http://scrapytest.org/search"
    assert not offer(dupefilter, Request(url))
    assert not offer(dupefilter, Request(url, method="POST", body=b"q=1"))
    assert not offer(dupefilter, Request(url, method="POST", body=b"q=2"))
    assert offer(dupefilter, Request(url, method="POST", body=b"q=2"))
    assert not offer(dupefilter, Request(url, method="HEAD"))
    assert offer(dupefilter, Request(url))  # GET keys are unchanged
    close(crawler, dupefilter)


def test_duplicates_are_counted_once() -> None:
    """Scrapy's ``test_log``: through Scrapy's scheduler (embedded mode), which calls
    ``log()`` for each."""
    crawler = with_engine(make_crawler({}))
    scheduler = build_from_crawler(Scheduler, crawler)
    scheduler.open(crawler.spider)
    for _ in range(3):
        scheduler.enqueue_request(Request("http://scrapytest.org/index.html"))
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    scheduler.close("finished")
    crawler.signals.send_catch_log(signals.spider_closed, spider=crawler.spider, reason="done")


def test_debug_setting_reaches_the_dupefilter(mode: dict[str, Any]) -> None:
    crawler = make_crawler(mode, DUPEFILTER_DEBUG=True)
    dupefilter = dupefilter_of(crawler)
    assert dupefilter.frontier.keyer.debug  # type: ignore[attr-defined]
    close(crawler, dupefilter)


def test_offsite_requests_are_never_admitted(mode: dict[str, Any]) -> None:
    """``allowed_domains``: refused before the seen filter, counted as Scrapy counts them."""
    crawler = make_crawler(mode)
    with_engine(crawler)  # and so the crawl's OffsiteMiddleware
    dupefilter = dupefilter_of(crawler)
    assert offer(dupefilter, Request("http://other.example/1"))
    assert offer(dupefilter, Request("http://other.example/2"))
    assert not offer(dupefilter, Request("http://sub.scrapytest.org/1"))
    assert not offer(dupefilter, Request("http://other.example/3", meta={"allow_offsite": 1}))
    stats = crawler.stats
    assert stats.get_value("offsite/filtered") == 2
    assert stats.get_value("offsite/domains") == 1
    assert stats.get_value("seen/new") == 2
    close(crawler, dupefilter)


def test_batch_duplicates_fire_request_dropped() -> None:
    """Embedded mode: the links of a page that the batch filters are dropped as Scrapy's
    scheduler drops the requests its dupefilter refuses (shared mode fires the signal when
    the admission's answer arrives)."""
    crawler = make_crawler({})
    dropped: list[str] = []

    def on_dropped(request: Request, spider: Spider) -> None:
        dropped.append(request.url)

    crawler.signals.connect(on_dropped, signal=signals.request_dropped)
    middleware = BatchDedupeMiddleware.from_crawler(crawler)
    page = Request("http://scrapytest.org/")
    response = HtmlResponse(page.url, body=b"<html></html>", request=page)
    links = [
        Request("http://scrapytest.org/a"),
        Request("http://scrapytest.org/a?utm_source=x"),
        Request("http://scrapytest.org/b"),
        Request("http://scrapytest.org/b"),
    ]
    passed = list(middleware.process_spider_output(response, iter(links)))
    assert [request.url for request in passed] == [
        "http://scrapytest.org/a",
        "http://scrapytest.org/b",
    ]
    assert dropped == ["http://scrapytest.org/a?utm_source=x", "http://scrapytest.org/b"]
    crawler.signals.send_catch_log(signals.spider_closed, spider=crawler.spider, reason="done")
