"""Scrapy's ``CLOSESPIDER_PAGECOUNT``, ``CLOSESPIDER_ITEMCOUNT`` and ``CLOSESPIDER_TIMEOUT``
for a shared crawl as a whole.

Scrapy's own ``CloseSpider`` extension counts per process: four workers with
``CLOSESPIDER_PAGECOUNT=1000`` would fetch up to 4000 pages. With ``REDIS_URL`` set,
:class:`CrawlWideLimits` adds each worker's pages (responses received, as Scrapy counts them)
and items to counters under the crawl's prefix (``<prefix>:limits``) and closes every worker
once the crawl's total reaches the limit; the timeout runs from the crawl's first start, on
the Redis server's clock. Scrapy's extension stays on: its per-process counts never exceed
the crawl's, so the crawl-wide limit always trips first.

Counts go to Redis in a thread, never on the reactor: one report in flight at a time, sent
as soon as a page or item arrives and at least every :data:`CHECK_INTERVAL` seconds. A worker
also stops at once when the crawl's last known totals plus its own counts since reach a
limit. Workers may overshoot a limit by the pages they fetch while a report travels, as
Scrapy's own extension overshoots by the requests in flight. ``scrapy frontier SPIDER
--reset --yes`` starts the counts (and the timeout) afresh.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import defer, task, threads

from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.lua import FrontierScripts
from bloom_frontier.frontier.redis.protocol import CrawlTotals
from bloom_frontier.redis_client import redis_from_url

if TYPE_CHECKING:
    from typing import Self

    import redis
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

#: Seconds between reports when nothing happens (for the timeout and other workers' counts).
CHECK_INTERVAL = 1.0


class CrawlWideLimits:
    """Closes this worker when the whole crawl reached a ``CLOSESPIDER_*`` limit (see the
    module docstring). Stats: ``limits/crawl_pages``, ``limits/crawl_items`` (the crawl's
    totals at the last report), ``limits/unreported`` (reports Redis did not take)."""

    def __init__(
        self,
        crawler: Crawler,
        client: redis.Redis,
        keys: FrontierKeys,
        *,
        pagecount: int = 0,
        itemcount: int = 0,
        timeout: float = 0.0,
    ) -> None:
        self.crawler = crawler
        self.client = client
        self.scripts = FrontierScripts(client, keys, ["limits"])
        self.pagecount = pagecount
        self.itemcount = itemcount
        self.timeout = timeout
        self._pages = 0  # counted here, not yet reported
        self._items = 0
        self._sent = (0, 0)  # pages and items of the report in flight
        self._known = (0, 0)  # the crawl's totals at the last answer
        self._reporting: Deferred[Any] | None = None
        self._closing = False  # a limit was reached: no more checks
        self._closed = False  # the spider closed: no more reports but the last one
        self._loop = task.LoopingCall(self.report)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if not settings.get("REDIS_URL"):
            raise NotConfigured  # Scrapy's CloseSpider counts for an embedded crawl
        limits = {
            "pagecount": settings.getint("CLOSESPIDER_PAGECOUNT"),
            "itemcount": settings.getint("CLOSESPIDER_ITEMCOUNT"),
            "timeout": settings.getfloat("CLOSESPIDER_TIMEOUT"),
        }
        if not any(limits.values()):
            raise NotConfigured
        assert crawler.spidercls is not None
        prefix = settings["FRONTIER_KEY_PREFIX"] % {"spider": crawler.spidercls.name}
        client = redis_from_url(settings["REDIS_URL"])
        extension = cls(crawler, client, FrontierKeys.for_prefix(prefix), **limits)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        if extension.pagecount:
            crawler.signals.connect(extension.page_received, signal=signals.response_received)
        if extension.itemcount:
            crawler.signals.connect(extension.item_scraped, signal=signals.item_scraped)
        return extension

    def spider_opened(self, spider: Spider) -> None:
        self._loop.start(CHECK_INTERVAL, now=True)

    def page_received(self) -> None:
        self._pages += 1
        self.count_locally()

    def item_scraped(self) -> None:
        self._items += 1
        self.count_locally()

    def count_locally(self) -> None:
        """Close at once when the crawl's last known totals plus what this worker counted
        since (a lower bound of the crawl's totals: they only grow) reach a limit; report."""
        if not self._closing:
            self.check(
                self._known[0] + self._sent[0] + self._pages,
                self._known[1] + self._sent[1] + self._items,
            )
        self.report()

    def report(self) -> None:
        """Send the counts not yet reported (unless a report is in flight: the next one
        takes them) and close the spider if a limit is reached."""
        if self._reporting is not None or self._closed:
            return
        pages, items = self._sent = (self._pages, self._items)
        self._pages = self._items = 0
        self._reporting = threads.deferToThread(self.scripts.run, "limits", [pages, items])
        self._reporting.addCallbacks(self._answered, self._not_answered, errbackArgs=(pages, items))
        self._reporting.addBoth(self._reported)

    def _answered(self, reply: list[int]) -> None:
        totals = CrawlTotals.from_reply(reply)
        pages, items, elapsed_ms = totals.pages, totals.items, totals.elapsed_ms
        self._known, self._sent = (pages, items), (0, 0)
        stats = self.crawler.stats
        assert stats is not None
        stats.set_value("limits/crawl_pages", pages)
        stats.set_value("limits/crawl_items", items)
        if not self._closing:
            self.check(pages, items, elapsed_ms / 1000)

    def check(self, pages: int, items: int, elapsed: float = 0.0) -> None:
        """Close this worker if the crawl's ``pages``, ``items`` or ``elapsed`` seconds
        reached a limit."""
        if self.pagecount and pages >= self.pagecount:
            self.close("closespider_pagecount", f"{pages} pages (CLOSESPIDER_PAGECOUNT)")
        elif self.itemcount and items >= self.itemcount:
            self.close("closespider_itemcount", f"{items} items (CLOSESPIDER_ITEMCOUNT)")
        elif self.timeout and elapsed >= self.timeout:
            self.close("closespider_timeout", f"{elapsed:.1f} s (CLOSESPIDER_TIMEOUT)")

    def _not_answered(self, failure: Failure, pages: int, items: int) -> None:
        """Keep the counts for the next report; the crawl goes on meanwhile."""
        self._sent = (0, 0)
        self._pages += pages
        self._items += items
        stats = self.crawler.stats
        assert stats is not None
        if not stats.get_value("limits/unreported"):
            logger.warning("Cannot report crawl-wide counts to Redis now: %s", failure.value)
        stats.inc_value("limits/unreported")

    def _reported(self, result: None) -> None:
        self._reporting = None

    def close(self, reason: str, reached: str) -> None:
        """Close this worker: the crawl as a whole reached a limit."""
        self._closing = True
        logger.info("Crawl-wide limit reached: %s across all workers; closing", reached)
        assert self.crawler.engine is not None
        deferred_from_coro(self.crawler.engine.close_spider_async(reason=reason))
        self.report()  # the other workers learn it from the totals

    def spider_closed(self, spider: Spider) -> Deferred[Any]:
        """Report the last counts (other workers go on counting), then disconnect."""
        if self._loop.running:
            self._loop.stop()
        self._closing = self._closed = True
        pending = self._reporting or defer.succeed(None)
        pending.addBoth(lambda _: self._last_report())
        pending.addBoth(lambda _: self.client.close())
        return pending

    def _last_report(self) -> Deferred[Any] | None:
        if not (self._pages or self._items):
            return None
        last = threads.deferToThread(self.scripts.run, "limits", [self._pages, self._items])
        last.addErrback(
            lambda failure: logger.warning("Last counts not reported: %s", failure.value)
        )
        return last
