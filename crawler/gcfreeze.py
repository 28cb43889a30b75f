"""Extension: the garbage collector tuned for a crawl (``GC_FREEZE_ENABLED``).

Start-up's objects (modules, classes, functions, settings, middlewares) live as long as the
process, yet each full (generation 2) collection the crawl triggers walks them all again.
When the spider opens they are moved out of the collector's reach (``gc.freeze()``, after
one collection so that start-up's garbage is not kept), as Python's documentation advises
for long-running processes; and the youngest generation is collected every
:data:`YOUNG_THRESHOLD` net new container objects instead of Python's 700 (a page's links
and their items come by the hundred). Objects the crawl creates are collected as before,
only in fewer, larger batches. What it saves: docs/scaling.md, "CPU per page".
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

#: Net new container objects between two collections of the youngest generation.
YOUNG_THRESHOLD = 10_000


class FreezeStartupObjects:
    """See the module docstring."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("GC_FREEZE_ENABLED"):
            raise NotConfigured
        extension = cls()
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        return extension

    def spider_opened(self) -> None:
        gc.collect()
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
