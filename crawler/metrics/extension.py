"""The worker's Prometheus endpoint: an extension the add-on installs, on with ``METRICS_PORT``.

The endpoint is prometheus_client's own HTTP server, in a daemon thread of its own: a scrape
reads the stats and the store's figures and, on a shared frontier, asks Redis for the
crawl-wide view, all in that thread, never on Twisted's loop. It starts when the spider
opens (the crawl services are there then) and stops ``METRICS_LINGER`` seconds after it
closed, so Prometheus can scrape the last figures. Settings: ``METRICS_PORT``,
``METRICS_ADDRESS``, ``METRICS_LINGER`` (:mod:`bloom_frontier.defaults`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task, threads

from bloom_frontier.extras import require_extra
from bloom_frontier.frontier.memory import MemoryFrontier
from bloom_frontier.frontier.politeness import HostLimits
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.status import crawl_name
from bloom_frontier.metrics import EXTRA, MODULE, Endpoint, endpoint_from_settings
from bloom_frontier.redis_client import command_client
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self
    from wsgiref.simple_server import WSGIServer

    from scrapy import Spider
    from scrapy.crawler import Crawler

    from bloom_frontier.metrics.families import SharedCrawl

logger = logging.getLogger(__name__)


class WorkerMetrics:
    """Serves this worker's metrics at :attr:`endpoint` while its spider runs."""

    def __init__(self, crawler: Crawler, endpoint: Endpoint) -> None:
        self.crawler = crawler
        self.endpoint = endpoint
        self.server: WSGIServer | None = None
        self.shared: SharedCrawl | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        endpoint = endpoint_from_settings(crawler.settings)
        if endpoint is None:
            raise NotConfigured  # no message: Scrapy would log it as a warning on every crawl
        require_extra(MODULE, EXTRA, "METRICS_PORT (the worker's Prometheus endpoint)")
        extension = cls(crawler, endpoint)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def spider_opened(self, spider: Spider) -> None:
        from prometheus_client import start_http_server

        from bloom_frontier.metrics.families import SharedCrawl, WorkerSources, worker_registry

        settings, stats = self.crawler.settings, self.crawler.stats
        assert stats is not None
        services = services_of(self.crawler)
        frontier = services.frontier
        error_rate = settings.getfloat("SEEN_FILTER_ERROR_RATE")
        sources = WorkerSources(
            stats=lambda: dict(stats.get_stats()),  # a copy, made under the GIL at once
            store=services.recorder.store,
            crawl=spider.name,
            error_rate=error_rate,
        )
        if isinstance(frontier, RedisFrontier):
            prefix = frontier.keys.prefix
            self.shared = SharedCrawl(
                command_client(settings["REDIS_URL"]),
                prefix,
                error_rate,
                HostLimits.from_settings(settings),
            )
            sources.shared, sources.crawl, sources.worker = (
                self.shared,
                crawl_name(prefix),
                frontier.owner,
            )
        elif isinstance(frontier, MemoryFrontier):
            sources.memory_seen = frontier.seen
        try:
            self.server, _thread = start_http_server(
                self.endpoint.port, self.endpoint.address, registry=worker_registry(sources)
            )
        except OSError as exc:
            logger.error("Cannot serve metrics at %s: %s", self.endpoint.url, exc)
            return
        logger.info("Serving metrics at %s", self.endpoint.url)

    async def spider_closed(self, spider: Spider) -> None:
        """Stop serving after ``METRICS_LINGER`` seconds, in a thread (stopping the server
        waits for its loop); Scrapy waits for it before the process exits."""
        if self.server is None:
            return
        server, self.server = self.server, None
        shared, self.shared = self.shared, None

        def stop() -> None:
            server.shutdown()
            server.server_close()
            if shared is not None:
                shared.client.close()

        from twisted.internet import reactor  # the one Scrapy installed: not at import

        await maybe_deferred_to_future(task.deferLater(reactor, self.endpoint.linger))
        await maybe_deferred_to_future(threads.deferToThread(stop))
