"""``JOBDIR`` disk queues that store requests as JSON instead of pickle.

queuelib's disk queues (what Scrapy's own are built on) holding
:func:`~crawler.frontier.serialize.request_to_json` text. A request that has no JSON form
raises :class:`~crawler.frontier.serialize.RequestNotSerializable` (a ``ValueError``), so
Scrapy's scheduler keeps it in memory and counts it under ``scheduler/unserializable``,
exactly as it does for requests pickle cannot handle.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from queuelib import queue

from crawler.frontier.serialize import request_from_json, request_to_json

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
        super().__init__(key)  # type: ignore[call-arg]

    @classmethod
    def from_crawler(cls, crawler: Crawler, key: str, *args: Any, **kwargs: Any) -> Self:
        return cls(crawler, key)

    def push(self, request: Request) -> None:
        super().push(request_to_json(request, self.spider).encode())  # type: ignore[misc]

    def pop(self) -> Request | None:
        data = super().pop()  # type: ignore[misc]
        return request_from_json(data, self.spider) if data else None

    def peek(self) -> Request | None:
        data = super().peek()  # type: ignore[misc]
        return request_from_json(data, self.spider) if data else None


class JsonFifoDiskQueue(_JsonRequests, queue.FifoDiskQueue):
    """First in, first out (``SCHEDULER_START_DISK_QUEUE``)."""


class JsonLifoDiskQueue(_JsonRequests, queue.LifoDiskQueue):
    """Last in, first out (``SCHEDULER_DISK_QUEUE``: depth first, as Scrapy's default)."""
