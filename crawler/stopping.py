"""Stopping a worker: the first SIGTERM or Ctrl-C finishes what it holds, the second stops it
at once.

Scrapy's first signal starts a graceful stop (downloads in flight finish, the spider closes,
the record store writes what is left); its second stops the reactor. That is not enough
here: the process then still waits for the threads it started (the record store's writer
retrying a full disk or a locked file, Redis calls), so two SIGTERMs could be ignored for
minutes. :class:`StopControl` (installed by ``scrapy crawl``) keeps Scrapy's handling and
adds to it:

- the first signal logs what the worker waits for (downloads in flight, the requests it
  holds leases on, answers not yet delivered to Redis) and how to stop at once;
- the second logs what is left behind and ends the process within :data:`GRACE` seconds,
  whatever its threads are doing, with exit status 128 + the signal's number (130 for
  Ctrl-C, 143 for SIGTERM), never "finished".

Nothing of a shared crawl is lost: a page's lease is answered only once its records are
committed, so every page this worker held is leased again when its lease expires and fetched
by another worker or the next run. Embedded (no ``REDIS_URL``), what was not written yet is
lost, as with Scrapy's own forced stop.

Only with Twisted's reactor (the project's default), where Scrapy installs its handlers once
the reactor runs; a process without it keeps Scrapy's handling alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from scrapy.utils.ossignal import install_shutdown_handlers, signal_names

from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from types import FrameType

    from scrapy.crawler import Crawler, CrawlerProcessBase

logger = logging.getLogger(__name__)

#: Seconds the second signal leaves the reactor to stop before the process ends anyway.
GRACE = 2.0


def downloads_in_flight(crawler: Crawler) -> int:
    """Requests handed to the downloader that have neither a response nor an error yet
    (Scrapy's downloader stats)."""
    assert crawler.stats is not None
    stats = crawler.stats.get_stats()
    count = stats.get("downloader/request_count", 0) - stats.get("downloader/response_count", 0)
    return max(0, count - stats.get("downloader/exception_count", 0))


def held_leases(crawler: Crawler) -> tuple[int, int, float] | None:
    """(leases this worker holds, answers waiting for Redis, lease seconds) of a shared
    crawl; None embedded."""
    from bloom_frontier.frontier.redis import RedisFrontier

    if crawler.engine is None or not crawler.settings.get("REDIS_URL"):
        return None
    frontier = services_of(crawler).frontier
    if not isinstance(frontier, RedisFrontier):
        return None
    return len(frontier.leases), frontier.pending_answers, frontier.lease_ttl


class StopControl:
    """See the module docstring; :meth:`install` before the process starts, then
    :meth:`exit_if_forced` once it returned."""

    def __init__(self, process: CrawlerProcessBase) -> None:
        self.process = process
        #: The second signal's number, once it came.
        self.forced: int | None = None
        self._scrapy_handler: Any = None

    def install(self) -> None:
        """Take over the signal handlers once Scrapy installed its own (when the reactor has
        started: the first turn of the loop after its start-up triggers)."""
        from twisted.internet import reactor

        reactor.callWhenRunning(  # type: ignore[attr-defined]
            lambda: reactor.callLater(0, self._take_over)  # type: ignore[attr-defined]
        )

    def _take_over(self) -> None:
        self._scrapy_handler = signal.getsignal(signal.SIGTERM)
        if callable(self._scrapy_handler):
            install_shutdown_handlers(self._first)

    def _first(self, signum: int, frame: FrameType | None) -> None:
        """Scrapy's graceful stop (which installs its second handler), then a line saying
        what it waits for. No logging here: the signal may interrupt a write to the log."""
        from twisted.internet import reactor

        self._scrapy_handler(signum, frame)
        self._scrapy_handler = signal.getsignal(signum)
        install_shutdown_handlers(self._second)
        reactor.callFromThread(self._say_waiting, signum)  # type: ignore[attr-defined]

    def _second(self, signum: int, frame: FrameType | None) -> None:
        from twisted.internet import reactor

        self.forced = signum
        reactor.callFromThread(self._say_left_behind, signum)  # type: ignore[attr-defined]
        if callable(self._scrapy_handler):
            self._scrapy_handler(signum, frame)  # stops the reactor
        # Off the loop: the reactor's own shutdown may wait for its threads, so the process
        # is ended anyway GRACE seconds on.
        stop_now = threading.Timer(GRACE, self.exit_if_forced)
        stop_now.daemon = True
        stop_now.start()

    def _say_waiting(self, signum: int) -> None:
        again = f"press Ctrl-C again (or send {signal_names[signum]} again) to stop now"
        for crawler in list(self.process.crawlers):
            downloads = downloads_in_flight(crawler)
            shared = held_leases(crawler)
            if shared is None:
                logger.warning(
                    "Stopping: waiting for %d download(s) in flight and the record store's "
                    "last writes; %s (what is not written yet is then lost)",
                    downloads,
                    again,
                )
                continue
            leases, answers, _ttl = shared
            logger.warning(
                "Stopping: waiting for %d download(s) in flight, %d leased request(s) not "
                "handled yet and %d handled page(s) whose records are written before their "
                "leases are answered; %s: the leases then expire and another worker, or the "
                "next run, fetches those pages",
                downloads,
                leases,
                answers,
                again,
            )

    def _say_left_behind(self, signum: int) -> None:
        for crawler in list(self.process.crawlers):
            shared = held_leases(crawler)
            if shared is None:
                logger.error(
                    "Stopped at once (%s twice): records not written yet are lost",
                    signal_names[signum],
                )
                continue
            leases, answers, ttl = shared
            logger.error(
                "Stopped at once (%s twice): %d lease(s) left unanswered expire within %g s; "
                "another worker, or the next run, fetches their pages",
                signal_names[signum],
                leases + answers,
                ttl,
            )

    def exit_if_forced(self) -> None:
        """After a second signal, end the process now (its threads are not waited for);
        otherwise return."""
        if self.forced is None:
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(128 + self.forced)
