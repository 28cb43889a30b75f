"""``JOBDIR`` disk queues that store requests as JSON instead of pickle.

queuelib's disk queues (what Scrapy's own are built on) holding
:func:`~bloom_frontier.frontier.serialize.request_to_json` text. A request that has no JSON form
raises :class:`~bloom_frontier.frontier.serialize.RequestNotSerializable` (a ``ValueError``), so
Scrapy's scheduler keeps it in memory and counts it under ``scheduler/unserializable``,
exactly as it does for requests pickle cannot handle.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from queuelib import queue

from bloom_frontier.frontier.decode import RequestDecoder
from bloom_frontier.frontier.serialize import request_to_json

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler


class _JsonRequests:
    """Requests in and out of a queuelib disk queue (the class it is mixed into) as JSON,
    built as Scrapy builds its disk queues: ``from_crawler(crawler, key)``, ``key`` the
    queue's path (its directory is created)."""

    def __init__(self, crawler: Crawler, key: str) -> None:
        Path(key).parent.mkdir(parents=True, exist_ok=True)
        self.spider = crawler.spider
        # Stored requests are read back strictly (bloom_frontier.frontier.decode), under the
        # crawl's FRONTIER_MAX_REQUEST_BYTES and FRONTIER_REQUEST_CLASSES, as from Redis.
        self.decoder = RequestDecoder.from_settings(crawler.settings, crawler.stats)
        super().__init__(key)  # type: ignore[call-arg]

    @classmethod
    def from_crawler(cls, crawler: Crawler, key: str, *args: Any, **kwargs: Any) -> Self:
        return cls(crawler, key)

    def push(self, request: Request) -> None:
        text = request_to_json(request, self.spider, self.decoder.max_bytes)
        super().push(text.encode())  # type: ignore[misc]

    def pop(self) -> Request | None:
        data = super().pop()  # type: ignore[misc]
        return self.decoder.decode(data, self.spider) if data else None

    def peek(self) -> Request | None:
        data = super().peek()  # type: ignore[misc]
        return self.decoder.decode(data, self.spider) if data else None


class JsonFifoDiskQueue(_JsonRequests, queue.FifoDiskQueue):
    """First in, first out (``SCHEDULER_START_DISK_QUEUE``)."""


class JsonLifoDiskQueue(_JsonRequests, queue.LifoDiskQueue):
    """Last in, first out (``SCHEDULER_DISK_QUEUE``: depth first, as Scrapy's default)."""
