"""A short, human-readable summary at the end of every crawl."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from scrapy import Spider, signals

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)


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
    documents = statuses.get("200", 0) - count("robotstxt/response_status_count/200")
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
    """Logs :func:`summarize` when the spider closes."""

    def __init__(self, stats: StatsCollector) -> None:
        self.stats = stats
        self.started = time.monotonic()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        assert crawler.stats is not None
        extension = cls(crawler.stats)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def spider_opened(self, spider: Spider) -> None:
        self.started = time.monotonic()

    def spider_closed(self, spider: Spider, reason: str) -> None:
        elapsed = time.monotonic() - self.started
        logger.info(
            "%s\n  finish reason:          %s", summarize(self.stats.get_stats(), elapsed), reason
        )
