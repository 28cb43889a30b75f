"""A short, human-readable summary at the end of every crawl: its figures, where its records
went and the commands to run next.

"Documents fetched" counts the 200 responses that reached the engine (stat
:data:`DOCUMENTS_STAT`, robots.txt's own taken off), not the downloader's status counts: a
response Scrapy refuses after its download (a compressed body past ``DOWNLOAD_MAXSIZE`` once
decompressed, dropped by ``HttpCompressionMiddleware``) is counted by the downloader as a 200
but is no document.
"""

from __future__ import annotations

import logging
import shlex
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from scrapy import Spider, signals
from scrapy.settings import SETTINGS_PRIORITIES

from bloom_frontier.pipelines.database import DEFAULT_STORE_URL

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: Width of a summary line's label, so values line up.
LABEL_WIDTH = 24

#: 200 responses that reached the engine (robots.txt's among them): what the spider got.
DOCUMENTS_STAT = "summary/response_received_status_count/200"


def _line(label: str, value: object) -> str:
    """``  label:   value``, aligned; an empty label continues the line above."""
    return f"  {label + ':' if label else '':<{LABEL_WIDTH}}{value}"


def summarize(stats: dict[str, object], elapsed: float, reason: str) -> str:
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
    if count("links/over_page_cap"):  # beyond PAGE_MAX_LINKS on one page
        rejected["over-page-cap"] = count("links/over_page_cap")
    statuses = prefixed("downloader/response_status_count/")
    documents = count(DOCUMENTS_STAT) - count("robotstxt/response_status_count/200")
    redirects = sum(n for status, n in statuses.items() if status.startswith("3"))
    lines = [
        "Crawl summary",
        _line("documents fetched", documents),
        _line("items scraped", count("item_scraped_count")),
        _line("responses by status", ", ".join(f"{s}: {n}" for s, n in statuses.items()) or "none"),
        _line("redirects followed", redirects),
        _line("links filtered as seen", count("dupefilter/filtered")),
        # The site spider's own count, and Scrapy's (allowed_domains) for other spiders.
        _line("links off the site", count("links/offsite") + count("offsite/filtered")),
        _line("links rejected", ", ".join(f"{r}: {n}" for r, n in rejected.items()) or "none"),
        *(
            [
                _line(
                    "learned rules",
                    f"{count('learn/proposed')} proposed, {count('learn/applied')} applied, "
                    f"{count('learn/revoked')} revoked ({count('learn/requeued')} links a "
                    f"revoked rule had merged queued again, {count('learn/rechecked')} re-checks)",
                )
            ]
            if any(count(f"learn/{name}") for name in ("proposed", "applied", "revoked"))
            else []
        ),
        _line("errors", count("log_count/ERROR")),
        _line("elapsed", f"{elapsed:.1f} s"),
        _line("finish reason", reason),
    ]
    return "\n".join(lines)


def without_password(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``: fit for a log.

    >>> without_password("postgresql://crawler:s3cret@db.example/records")
    'postgresql://crawler:***@db.example/records'
    >>> without_password("redis://:s3cret@127.0.0.1:6379/0")
    'redis://:***@127.0.0.1:6379/0'
    >>> without_password("sqlite:///crawl.sqlite")
    'sqlite:///crawl.sqlite'
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _given(settings: BaseSettings, name: str) -> list[str]:
    """``-s NAME=VALUE`` (password hidden) when ``name`` was given on the command line: a
    later command needs it too. A project's setting or an environment variable reaches the
    next command by itself."""
    if settings.getpriority(name) != SETTINGS_PRIORITIES["cmdline"] or not settings.get(name):
        return []
    return ["-s", f"{name}={without_password(settings[name])}"]


def where_next(settings: BaseSettings, spider: str) -> list[str]:
    """Summary lines naming the record store and the commands to run next (the
    redirect map, the audit report; the shared crawl's state with ``REDIS_URL``), written
    as they run from the same directory."""
    store = _given(settings, "STORE_URL")
    commands = [
        (["scrapy", "redirects", "--format", "nginx", *store], "redirects.conf", "redirect map"),
        (["scrapy", "redirects", "--format", "html", *store], "redirects.html", "audit report"),
    ]
    if settings.get("REDIS_URL"):
        given = [*_given(settings, "REDIS_URL"), *_given(settings, "FRONTIER_KEY_PREFIX")]
        frontier = ["scrapy", "frontier", spider, *given]
        commands.append((frontier, "", "queue, leases, failures of the shared crawl"))
    lines = [_line("records in", without_password(settings.get("STORE_URL") or DEFAULT_STORE_URL))]
    for index, (command, output, what) in enumerate(commands):
        shown = shlex.join(command) + (f" > {output}" if output else "") + f"  # {what}"
        lines.append(_line("" if index else "next", shown))
    return lines


class CrawlSummary:
    """Logs :func:`summarize` and :func:`where_next` as the crawl's last words: computed
    when the spider closes, printed when the engine has stopped, after Scrapy's own closing
    messages and its stats dump (``STATS_DUMP``, at INFO as in any Scrapy project)."""

    def __init__(self, stats: StatsCollector, next_steps: list[str]) -> None:
        self.stats = stats
        self.next_steps = next_steps
        self.started = time.monotonic()
        self.summary: str | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        assert crawler.stats is not None
        assert crawler.spidercls is not None
        extension = cls(crawler.stats, where_next(crawler.settings, crawler.spidercls.name))
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
        figures = summarize(self.stats.get_stats(), elapsed, reason)
        self.summary = "\n".join([figures, *self.next_steps])

    def engine_stopped(self) -> None:
        if self.summary is not None:
            logger.info("%s", self.summary)
