"""Extension for tests: every handled page's records take ``SLOW_RECORDS_SECONDS`` to commit,
as with a busy database. The page's lease is answered only after that (its answer waits in
the frontier's outbox meanwhile, see :data:`crawler.frontier.page_handled`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.asyncio import sleep

from crawler.frontier import page_handled

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler


class SlowRecordCommits:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        extension = cls(crawler.settings.getfloat("SLOW_RECORDS_SECONDS"))
        crawler.signals.connect(extension.committed, signal=page_handled)
        return extension

    async def committed(self, **_: Any) -> None:
        await sleep(self.seconds)
