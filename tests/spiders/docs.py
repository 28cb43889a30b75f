"""``docs``: a spider kept to one site by ``allowed_domains`` (``-s SPIDER_MODULES=tests.spiders``),
for commands that must honour it, such as ``scrapy seed``."""

from __future__ import annotations

from typing import ClassVar

from scrapy import Spider


class DocsSpider(Spider):
    name = "docs"
    allowed_domains: ClassVar[list[str]] = ["docs.example.com"]
