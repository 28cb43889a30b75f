"""Bounded pages: what handling one page may cost, however large the page.

- At most ``PAGE_MAX_LINKS`` links are taken from a page (the ``site`` spider reads no
  further; with any spider, at most that many of a page's requests reach its dedup batch):
  the others are counted under :data:`OVER_PAGE_CAP` and logged once per page
  (:func:`over_page_cap`).
- A page's links are admitted in chunks of at most :data:`ADMIT_CHUNK` requests (one call of
  the frontier, one Redis script, each), and the page's handling gives Twisted's loop a turn
  (:func:`loop_turn`) every :data:`LOOP_SLICE` seconds: downloads, timers, heartbeats and
  other pages go on while a page of many links is handled
  (:class:`bloom_frontier.middlewares.linkbatch.BatchDedupeMiddleware`).
- A large HTML or XML page (:data:`PARSE_IN_THREAD_BYTES`) is parsed in a thread before
  it reaches the spider (:class:`bloom_frontier.middlewares.linkbatch.LargePageParser`):
  lxml lets the loop run while it parses, a second or more for tens of megabytes.
- The download size limits (``DOWNLOAD_MAXSIZE``, ``DOWNLOAD_WARNSIZE``, decompression
  included) are Scrapy's own, with defaults for HTML crawls (:mod:`bloom_frontier.defaults`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.task import deferLater

if TYPE_CHECKING:
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: Stat: links of pages past ``PAGE_MAX_LINKS``, not taken.
OVER_PAGE_CAP = "links/over_page_cap"
#: Most requests of one page admitted in one frontier call (one Redis script call): a
#: larger batch ran for 272 ms inside Redis (200,000 keys), every other worker waiting.
ADMIT_CHUNK = 1000
#: Seconds a page's handling may keep Twisted's loop before giving it a turn.
LOOP_SLICE = 0.05
#: Bodies from this many bytes on are parsed in a thread (a smaller one parses in a few
#: milliseconds, less than the hand-over to a thread costs).
PARSE_IN_THREAD_BYTES = 1024 * 1024


def over_page_cap(stats: StatsCollector, response: Response, taken: int, left: int) -> None:
    """Count the ``left`` links of ``response`` past the cap, not taken (``taken`` were), and
    say so once for the page."""
    stats.inc_value(OVER_PAGE_CAP, left)
    logger.warning(
        "Page %s has %d links, more than PAGE_MAX_LINKS: took the first %d, left %d "
        "(counted under %s)",
        response.url[:200],
        taken + left,
        taken,
        left,
        OVER_PAGE_CAP,
    )


async def loop_turn() -> None:
    """Let Twisted's loop run what is due (I/O, timers, other pages' work) before going on."""
    from twisted.internet import reactor

    await maybe_deferred_to_future(deferLater(reactor, 0, lambda: None))
