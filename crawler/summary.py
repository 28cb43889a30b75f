"""A short, human-readable summary at the end of every crawl.

"Documents fetched" counts the 200 responses that reached the engine (stat
:data:`DOCUMENTS_STAT`, robots.txt's own taken off), not the downloader's status counts: a
response Scrapy refuses after its download (a compressed body past ``DOWNLOAD_MAXSIZE`` once
decompressed, dropped by ``HttpCompressionMiddleware``) is counted by the downloader as a 200
but is no document.
"""

from __future__ import annotations

import logging
import pprint
import time
from typing import TYPE_CHECKING, Any

from scrapy import Spider, signals

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: 200 responses that reached the engine (robots.txt's among them): what the spider got.
DOCUMENTS_STAT = "summary/response_received_status_count/200"


def summarize(stats: dict[str, object], elapsed: float) -> str:
    """The crawl's figures a person wants first, from Scrapy's stats."""

    def count(name: str) -> int:
        value = stats.get(name, 0)
        return value if isinstance(value, int) else 0

    def prefixed(prefix: str) -> dict[str, int]:
        return {
            name.removeprefix(prefix): value
            for name, value in sorted(stats.items())
            if name.startswith(prefix) and isinstance(value, int)
        }

    rejected = prefixed("dupefilter/invalid/")
    if count("links/junk"):
        rejected["junk-scheme"] = count("links/junk")
    statuses = prefixed("downloader/response_status_count/")
    documents = count(DOCUMENTS_STAT) - count("robotstxt/response_status_count/200")
    redirects = sum(n for status, n in statuses.items() if status.startswith("3"))
    lines = [
        "Crawl summary",
        f"  documents fetched:      {documents}",
        "  responses by status:    "
        + (", ".join(f"{s}: {n}" for s, n in statuses.items()) or "none"),
        f"  redirects followed:     {redirects}",
        f"  links filtered as seen: {count('dupefilter/filtered')}",
        # The site spider's own count, and Scrapy's (allowed_domains) for other spiders.
        f"  links off the site:     {count('links/offsite') + count('offsite/filtered')}",
        "  links rejected:         "
        + (", ".join(f"{reason}: {n}" for reason, n in rejected.items()) or "none"),
        f"  errors:                 {count('log_count/ERROR')}",
        f"  elapsed:                {elapsed:.1f} s",
    ]
    return "\n".join(lines)


class CrawlSummary:
    """Logs :func:`summarize` as the crawl's last words: computed when the spider closes,
    printed when the engine has stopped, after Scrapy's own closing messages. Scrapy's
    stats dump (40 lines) is demoted: with ``STATS_DUMP`` off (this project's default) the
    stats are logged at DEBUG, and stay in ``crawler.stats``."""

    def __init__(self, stats: StatsCollector, dump_stats: bool = False) -> None:
        self.stats = stats
        self.dump_stats = dump_stats
        self.started = time.monotonic()
        self.summary: str | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        assert crawler.stats is not None
        extension = cls(crawler.stats, not crawler.settings.getbool("STATS_DUMP"))
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.response_received, signal=signals.response_received)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(extension.engine_stopped, signal=signals.engine_stopped)
        return extension

    def spider_opened(self, spider: Spider) -> None:
        self.started = time.monotonic()

    def response_received(self, response: Response, **_: Any) -> None:
        if response.status == 200:
            self.stats.inc_value(DOCUMENTS_STAT)

    def spider_closed(self, spider: Spider, reason: str) -> None:
        elapsed = time.monotonic() - self.started
        stats = self.stats.get_stats()
        if self.dump_stats:
            logger.debug("Scrapy stats:\n%s", pprint.pformat(stats))
        self.summary = f"{summarize(stats, elapsed)}\n  finish reason:          {reason}"

    def engine_stopped(self) -> None:
        if self.summary is not None:
            logger.info("%s", self.summary)
