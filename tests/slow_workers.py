"""Extensions for tests that make a worker slow in the ways a busy one is, to check it keeps
its leases all the same."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.asyncio import sleep

from bloom_frontier.frontier import page_handled

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler


class SlowRecordCommits:
    """Every handled page's records take ``SLOW_RECORDS_SECONDS`` to commit, as with a busy
    database: the page's lease is answered only after that (its answer waits in the
    frontier's outbox meanwhile, see :data:`bloom_frontier.frontier.page_handled`)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        extension = cls(crawler.settings.getfloat("SLOW_RECORDS_SECONDS"))
        crawler.signals.connect(extension.committed, signal=page_handled)
        return extension

    async def committed(self, **_: Any) -> None:
        await sleep(self.seconds)


class LoopBlocker:
    """The loop is blocked for ``LOOP_BLOCK_SECONDS`` when the ``LOOP_BLOCK_AT``-th response
    arrives, as by a huge page parsed on a loaded machine; with ``LOOP_BLOCK_AT`` 0, when
    each response arrives, as in a worker whose every page takes that long to parse."""

    def __init__(self, seconds: float, at: int) -> None:
        self.seconds = seconds
        self.at = at
        self.responses = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        extension = cls(settings.getfloat("LOOP_BLOCK_SECONDS"), settings.getint("LOOP_BLOCK_AT"))
        crawler.signals.connect(extension.response_received, signal=signals.response_received)
        return extension

    def response_received(self, **_: Any) -> None:
        self.responses += 1
        if self.responses == self.at or not self.at:
            time.sleep(self.seconds)
