"""A downloader middleware for ``tests/test_start_up.py``: writes which of :data:`WATCHED`
were imported when the crawl's first page request (robots.txt aside) went out, as JSON, to
the file named by the ``START_UP_PROBE`` environment variable."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from scrapy import Request, Spider

#: Loaded only once the first document is fingerprinted (about 0.1 s of imports).
WATCHED = ("numpy", "bloom_frontier.content.fingerprint")


class FirstRequestImports:
    def __init__(self) -> None:
        self.written = False

    def process_request(self, request: Request, spider: Spider | None = None) -> Any:
        if not self.written and not request.url.endswith("/robots.txt"):
            self.written = True
            loaded = [name for name in WATCHED if name in sys.modules]
            with open(os.environ["START_UP_PROBE"], "w", encoding="utf-8") as file:
                json.dump(loaded, file)
        return None
