"""Extension: how long Twisted's loop was kept from running (blocking I/O on it shows here).

A timer fires every ``LOOP_STALL_METER_INTERVAL`` seconds; the longest delay
past its due time is the loop's longest stall. Stats: ``loop/longest_stall_ms``,
``loop/stalls_over_100ms`` (as the spider closes); a stall over 100 ms is logged as it
happens, and the longest one, closing included, when the engine stops. Add it to
``EXTENSIONS`` (``"bloom_frontier.loopwatch.LoopStallMeter": 0``) to measure a crawl;
``bench/loop_stall.py`` and ``tests/test_loop_stalls.py`` do.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from scrapy import signals
from twisted.internet.task import LoopingCall

from bloom_frontier import defaults

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: A stall this long is logged when it ends.
LOGGED_STALL = 0.1


class LoopStallMeter:
    """Measures the loop's stalls during a crawl (see the module docstring)."""

    def __init__(
        self, stats: StatsCollector, interval: float = defaults.LOOP_STALL_METER_INTERVAL
    ) -> None:
        self.stats = stats
        self.interval = interval
        self.longest = 0.0
        self._due = 0.0
        self._timer = LoopingCall(self._tick)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        assert crawler.stats is not None
        meter = cls(crawler.stats, crawler.settings.getfloat("LOOP_STALL_METER_INTERVAL"))
        crawler.signals.connect(meter.start, signal=signals.engine_started)
        crawler.signals.connect(meter.report, signal=signals.spider_closed)
        crawler.signals.connect(meter.stop, signal=signals.engine_stopped)
        return meter

    def start(self) -> None:
        self._due = time.monotonic() + self.interval
        self._timer.start(self.interval, now=False)

    def _tick(self) -> None:
        now = time.monotonic()
        stall = max(0.0, now - self._due)
        self._due = now + self.interval
        if stall > 0.1:
            self.stats.inc_value("loop/stalls_over_100ms")
        if stall >= LOGGED_STALL:
            logger.warning("Twisted's loop was blocked for %.2f s", stall)
        if stall > self.longest:
            self.longest = stall
            self.stats.set_value("loop/longest_stall_ms", round(stall * 1000))

    def report(self) -> None:
        """The figure so far, into the stats Scrapy dumps once the spider is closed."""
        self.stats.set_value("loop/longest_stall_ms", round(self.longest * 1000))

    def stop(self) -> None:
        """Stop measuring once the engine stopped: the spider's closing (the last flushes)
        is measured too, and logged, the stats having been dumped by then."""
        if self._timer.running:
            self._timer.stop()
        self.report()
        longest_ms = round(self.longest * 1000)
        logger.info("Twisted's loop: longest stall %d ms, closing included", longest_ms)
