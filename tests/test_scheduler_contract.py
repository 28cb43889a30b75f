"""Scrapy's scheduler contract, for both modes: embedded (Scrapy's own scheduler with
:class:`bloom_frontier.dupefilter.BloomDupeFilter`) and shared (:class:`RedisScheduler`).

Adapted from Scrapy's ``tests/test_scheduler.py`` (length, dequeue, priorities, a reopened
scheduler keeping its requests) and ``tests/test_dupefilters.py`` (``request_seen``), plus
what the contract says of duplicates (``enqueue_request`` returns False, the engine sends
``request_dropped``) and of the ``scheduler/enqueued`` and ``scheduler/dequeued`` stats.

Intended deviations of the shared scheduler (documented in its docstring):

- a request handed to the engine keeps ``has_pending_requests`` True until its page is
  answered (its links may still come, and the crawl is shared): the tests answer each
  dequeued request, as the engine's handling of the page would;
- ``__len__`` counts requests buffered here plus those queued in Redis at the last reading
  (other workers change it meanwhile);
- ``request_seen`` only checks the seen filter (Scrapy's marks it): marking and queueing are
  one atomic step of ``enqueue_request``, so that a worker killed in between loses nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from scrapy import Request, Spider, signals
from scrapy.core.engine import ExecutionEngine
from scrapy.core.scheduler import Scheduler
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

import bloom_frontier.settings as project_settings
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.scheduler import RedisScheduler
from bloom_frontier.services import services_of
from tests.engine_probe import HEARTBEAT, SLOW_ANSWER, probe
from tests.httpserver import TestServer, html

PRIORITIES = [
    ("http://foo.com/a", -2),
    ("http://foo.com/d", 1),
    ("http://foo.com/b", -1),
    ("http://foo.com/c", 0),
    ("http://foo.com/e", 2),
]
URLS = {"http://foo.com/a", "http://foo.com/b", "http://foo.com/c"}
#: The project's settings, less the process-wide ones (the test process has its reactor).
PROJECT = {
    name: getattr(project_settings, name)
    for name in dir(project_settings)
    if name.isupper() and name not in {"TWISTED_REACTOR", "TWISTED_DNS_RESOLVER"}
}


class ContractSpider(Spider):
    name = "contract"


class Mode:
    """One scheduler under test, as the engine drives it."""

    def __init__(self, shared: bool, redis_url: str) -> None:
        self.shared = shared
        settings = dict(PROJECT)
        if shared:
            settings["REDIS_URL"] = redis_url
        self.crawler = get_crawler(ContractSpider, settings)
        self.crawler.spider = ContractSpider.from_crawler(self.crawler)
        # The crawl's own engine, not started: the schedulers read its downloader.
        self.crawler.engine = ExecutionEngine(self.crawler, lambda _: None)
        self.dropped: list[Request] = []
        self.crawler.signals.connect(self._dropped, signal=signals.request_dropped)
        self.scheduler: Any = None

    def _dropped(self, request: Request) -> None:
        self.dropped.append(request)

    def open(self) -> Any:
        scheduler_cls = RedisScheduler if self.shared else Scheduler
        self.scheduler = build_from_crawler(scheduler_cls, self.crawler)
        self.scheduler.open(self.crawler.spider)
        return self.scheduler

    def enqueue(self, request: Request) -> bool:
        """What the engine does with a request to schedule."""
        if self.scheduler.enqueue_request(request):
            return True
        self.crawler.signals.send_catch_log(
            signal=signals.request_dropped, request=request, spider=self.crawler.spider
        )
        return False

    def dequeue_all(self) -> list[Request]:
        """Drain the scheduler, answering each page (shared: releasing its lease)."""
        requests = []
        while self.scheduler.has_pending_requests():
            request = self.scheduler.next_request()
            assert request is not None
            requests.append(request)
            services_of(self.crawler).frontier.admit(request, [])
        return requests

    def crawler_dupefilter(self) -> Any:
        """The dupefilter a shared crawl installs (its scheduler never asks it)."""
        from bloom_frontier.dupefilter import BloomDupeFilter

        return BloomDupeFilter.from_crawler(self.crawler)

    def stat(self, name: str) -> int:
        assert self.crawler.stats is not None
        return self.crawler.stats.get_value(name, 0)

    def close(self) -> None:
        self.scheduler.close("finished")
        frontier = services_of(self.crawler).frontier
        if isinstance(frontier, RedisFrontier):
            frontier.close()


@pytest.fixture(params=["embedded", "shared"])
def mode(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Mode]:
    made = Mode(request.param == "shared", redis_url)
    made.open()
    yield made
    made.close()


def test_length(mode: Mode) -> None:
    assert not mode.scheduler.has_pending_requests()
    assert len(mode.scheduler) == 0
    for url in URLS:
        assert mode.enqueue(Request(url))
    assert mode.scheduler.has_pending_requests()
    assert len(mode.scheduler) == len(URLS)


def test_dequeue(mode: Mode) -> None:
    for url in URLS:
        mode.enqueue(Request(url))
    assert {request.url for request in mode.dequeue_all()} == URLS
    assert mode.scheduler.next_request() is None


def test_dequeue_priorities(mode: Mode) -> None:
    for url, priority in PRIORITIES:
        mode.enqueue(Request(url, priority=priority))
    priorities = [request.priority for request in mode.dequeue_all()]
    assert priorities == sorted((priority for _, priority in PRIORITIES), reverse=True)


def test_duplicate_is_refused_counted_and_dropped(mode: Mode) -> None:
    assert mode.enqueue(Request("http://foo.com/a"))
    assert not mode.enqueue(Request("http://foo.com/a?utm_source=x"))  # same dedupe key
    assert [request.url for request in mode.dropped] == ["http://foo.com/a?utm_source=x"]
    assert mode.stat("scheduler/enqueued") == 1
    assert mode.stat("dupefilter/filtered") == 1
    assert mode.enqueue(Request("http://foo.com/a", dont_filter=True))
    assert mode.stat("scheduler/enqueued") == 2


def test_dequeued_requests_are_counted(mode: Mode) -> None:
    for url in URLS:
        mode.enqueue(Request(url))
    mode.dequeue_all()
    assert mode.stat("scheduler/dequeued") == len(URLS)


def test_request_seen(mode: Mode) -> None:
    """Scrapy's dupefilter contract: a request already scheduled is seen; a new one is not.
    The embedded filter marks it (Scrapy's scheduler queues it next); the shared one does
    not mark nor queue anything."""
    dupefilter = mode.scheduler.df if not mode.shared else mode.crawler_dupefilter()
    mode.enqueue(Request("http://foo.com/a"))
    assert dupefilter.request_seen(Request("http://foo.com/a"))
    new = Request("http://foo.com/new")
    assert not dupefilter.request_seen(new)
    assert dupefilter.request_seen(Request(new.url)) is not mode.shared  # embedded: marked
    if mode.shared:
        assert mode.enqueue(new)  # still new for the atomic mark-and-queue
        assert len(mode.scheduler) == 2


def test_reopened_shared_scheduler_keeps_its_requests(redis_url: str) -> None:
    first = Mode(True, redis_url)
    first.open()
    for url in URLS:
        first.enqueue(Request(url))
    first.close()
    second = Mode(True, redis_url)
    second.open()
    try:
        assert second.scheduler.has_pending_requests()
        assert {request.url for request in second.dequeue_all()} == URLS
    finally:
        second.close()


def test_shared_crawl_ends_as_soon_as_a_lease_finds_it_drained(redis_url: str) -> None:
    """A real shared crawl of one page whose answer reaches the frontier late (its lease is
    still held when the engine handles the page): the empty lease that then finds nothing
    queued nor leased anywhere wakes the engine, and the crawl closes at once, not at the
    engine's next 5 s heartbeat (each lease under way counts as pending, so a poll's wake,
    which starts one, never ends the crawl)."""
    with TestServer({"/": html()}) as site:
        seen = probe("drain", site.url, redis_url)
    assert seen["warnings"] == []
    ended_after = seen["closed"] - seen["last_response"]
    assert SLOW_ANSWER <= ended_after < SLOW_ANSWER + 1.5
    assert seen["closed"] - seen["started"] < HEARTBEAT
