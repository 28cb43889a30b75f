"""Plain Scrapy's other common shape for ``bench/throughput.py``: a ``scrapy.Spider`` that
follows every ``<a>`` with ``response.follow_all(css="a")``, none of this project's code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.http import Response


class FollowAllSpider(Spider):
    name = "follow_all"

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        self.start_urls = [start_url]
        self.allowed_domains = [urlsplit(start_url).hostname or ""]
        super().__init__(**kwargs)

    def parse(self, response: Response) -> Iterator[Request | dict[str, Any]]:
        yield {"url": response.url, "status": response.status}
        yield from response.follow_all(css="a")
