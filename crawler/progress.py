"""Progress a person can watch: one status line, refreshed in place on a terminal.

:class:`CrawlProgress` replaces Scrapy's ``LogStats`` (installed in its place, keeping its
``responses_per_minute``/``items_per_minute`` stats). When stderr is a terminal, one line
(:meth:`CrawlProgress.figures`: pages fetched, items scraped, queued, links filtered as seen,
pages/min over the last minute, errors, elapsed time) is redrawn every :data:`LIVE_INTERVAL`
seconds, and log records that arrive meanwhile are printed above it; it is erased when the
spider closes, so the crawl summary (:mod:`bloom_frontier.summary`) is what stays on screen.
Off a terminal (a pipe, a file, a container's log), the same figures are logged every
``LOGSTATS_INTERVAL`` seconds.

When the crawl opens, a crawl-wide ``DOWNLOAD_DELAY`` of :data:`SLOW_DELAY` seconds or more
(``startproject``'s template sets 1) is said in one line (:func:`pace_note`), with how long
:data:`ESTIMATE_PAGES` pages take at that pace and the settings to change.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, TextIO

from scrapy import Spider, signals
from scrapy.exceptions import NotConfigured
from scrapy.extensions.logstats import LogStats
from twisted.internet import task

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: Seconds between two redraws of the live line.
LIVE_INTERVAL = 1.0
#: The window pages/min is measured over, in seconds.
RATE_WINDOW_S = 60.0
#: ANSI: back to the start of the line, erase it.
ERASE_LINE = "\r\x1b[K"
#: A crawl-wide ``DOWNLOAD_DELAY`` (seconds) from which the crawl's start says how slow it is.
SLOW_DELAY = 0.5
#: The number of pages that start-up line gives the time of.
ESTIMATE_PAGES = 1000
#: A per-host concurrency that low is named among the settings to change.
LOW_CONCURRENCY = 2


def pace_note(settings: BaseSettings) -> str | None:
    """One line saying how slow the crawl-wide delay makes the crawl, or None when it does
    not. A host gets at most one request per ``DOWNLOAD_DELAY``, whatever its concurrency:
    Scrapy's downloader sends one request of a slot per delay (AutoThrottle only lengthens
    it), and the shared frontier leases one per delay across all workers
    (:mod:`bloom_frontier.frontier.politeness`), so more workers add no speed against a site.

    >>> import textwrap
    >>> from scrapy.settings import Settings
    >>> note = pace_note(Settings({"DOWNLOAD_DELAY": 1, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}))
    >>> print(textwrap.fill(note, 86))
    Slow crawl: DOWNLOAD_DELAY = 1.0 s allows at most 1.0 request/s per host: 1,000 pages
    take >= 17 min. To go faster on a site that allows it, lower DOWNLOAD_DELAY and raise
    CONCURRENT_REQUESTS_PER_DOMAIN (now 1).
    >>> pace_note(Settings({"DOWNLOAD_DELAY": 0.25})) is None
    True
    """
    delay = settings.getfloat("DOWNLOAD_DELAY")
    if delay < SLOW_DELAY:
        return None
    shared = bool(settings.get("REDIS_URL"))
    concurrency_setting = (
        "FRONTIER_HOST_CONCURRENCY"
        if shared and settings.getint("FRONTIER_HOST_CONCURRENCY")
        else "CONCURRENT_REQUESTS_PER_DOMAIN"
    )
    concurrency = settings.getint(concurrency_setting)
    rate = 1 / delay
    where = "per host, across all workers together" if shared else "per host"
    change = "lower DOWNLOAD_DELAY"
    if concurrency <= LOW_CONCURRENCY:
        change += f" and raise {concurrency_setting} (now {concurrency})"
    return (
        f"Slow crawl: DOWNLOAD_DELAY = {delay} s allows at most {rate:.1f} request/s {where}: "
        f"{ESTIMATE_PAGES:,} pages take >= {_duration(ESTIMATE_PAGES * delay)}. "
        f"To go faster on a site that allows it, {change}."
    )


def _duration(seconds: float) -> str:
    """``1000`` -> ``'17 min'``, ``5000`` -> ``'1 h 23 min'``."""
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{max(minutes, 1)} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class RateWindow:
    """A count's rate per minute over the last :data:`RATE_WINDOW_S` seconds."""

    def __init__(self, window: float = RATE_WINDOW_S) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def per_minute(self, now: float, count: int) -> float:
        """Record ``count`` at ``now`` (seconds); the rate since the window's oldest sample.

        >>> rate = RateWindow()
        >>> rate.per_minute(0.0, 0), rate.per_minute(30.0, 50), rate.per_minute(90.0, 110)
        (0.0, 100.0, 60.0)
        """
        self.samples.append((now, count))
        while len(self.samples) > 1 and self.samples[1][0] <= now - self.window:
            self.samples.popleft()
        oldest_time, oldest_count = self.samples[0]
        span = now - oldest_time
        return (count - oldest_count) * 60.0 / span if span > 0 else 0.0


class _EraseBeforeRecords(logging.Filter):
    """Erases the live line before a log record is written to the same terminal, so the
    record starts on a clean line (the next redraw puts the status back under it)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self.shown = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.shown:
            self.stream.write(ERASE_LINE)
            self.shown = False
        return True


class CrawlProgress(LogStats):
    """Scrapy's ``LogStats`` with the crawl's own figures, live on a terminal (see the
    module docstring)."""

    def __init__(
        self,
        crawler: Crawler,
        interval: float = 60.0,
        stream: TextIO | None = None,
        live: bool | None = None,
    ) -> None:
        assert crawler.stats is not None
        super().__init__(crawler.stats, interval)
        self.crawler = crawler
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.rate = RateWindow()
        self.started = time.monotonic()
        self._eraser = _EraseBeforeRecords(self.stream)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        interval = crawler.settings.getfloat("LOGSTATS_INTERVAL")
        if not interval:
            raise NotConfigured
        progress = cls(crawler, interval)
        crawler.signals.connect(progress.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(progress.spider_closed, signal=signals.spider_closed)
        return progress

    def spider_opened(self, spider: Spider) -> None:
        self.started = time.monotonic()
        note = pace_note(self.crawler.settings)
        if note is not None:
            logger.info("%s", note, extra={"spider": spider})
        super().spider_opened(spider)
        if not self.live:
            return
        assert self.task is not None
        self.task.stop()  # LogStats' own, every LOGSTATS_INTERVAL: redrawn more often here
        for handler in logging.getLogger().handlers:
            if getattr(handler, "stream", None) is self.stream:
                handler.addFilter(self._eraser)
        self.task = task.LoopingCall(self.log, spider)
        self.task.start(LIVE_INTERVAL)

    def figures(self) -> str:
        """The status line's text, e.g. ``120 pages, 80 items, 35 queued, 410 duplicates,
        62 pages/min, 0 errors, 0:01:57``: pages fetched (responses), items scraped, requests
        queued, links filtered as seen (duplicates); it fits 80 columns for most crawls."""
        stats = self.stats

        def count(name: str) -> int:
            value = stats.get_value(name, 0)
            return value if isinstance(value, int) else 0

        now = time.monotonic()
        pages = count("response_received_count")
        parts = [f"{pages} pages", f"{count('item_scraped_count')} items"]
        queued = self.queued()
        if queued is not None:
            parts.append(f"{queued} queued")
        parts += [
            f"{count('dupefilter/filtered')} duplicates",
            f"{self.rate.per_minute(now, pages):.0f} pages/min",
            f"{count('log_count/ERROR')} errors",
            _clock(now - self.started),
        ]
        return ", ".join(parts)

    def queued(self) -> int | None:
        """Requests waiting in the scheduler (the shared queue for a shared crawl), when the
        scheduler can tell."""
        engine = self.crawler.engine
        scheduler = getattr(engine, "scheduler", None) if engine is not None else None
        try:
            return len(scheduler)  # type: ignore[arg-type]
        except TypeError:
            return None

    def log(self, spider: Spider) -> None:
        self.calculate_stats()  # LogStats' own figures, for its final stats
        if not self.live:
            logger.info("Progress: %s", self.figures(), extra={"spider": spider})
            return
        width = shutil.get_terminal_size().columns
        line = self.figures()[: max(width - 1, 0)]  # a wrapped line cannot be redrawn
        self.stream.write(f"{ERASE_LINE}{line}")
        self.stream.flush()
        self._eraser.shown = True

    def spider_closed(self, spider: Spider, reason: str) -> None:
        super().spider_closed(spider, reason)
        if self._eraser.shown:
            self.stream.write(ERASE_LINE)
            self.stream.flush()
            self._eraser.shown = False
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self._eraser)


def _clock(seconds: float) -> str:
    """``3725.2`` -> ``'1:02:05'``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
