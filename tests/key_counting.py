"""Run one crawl in this process and print how often URLs were keyed (JSON on stdout).

``python -m tests.key_counting START_URL STORE_URL [REDIS_URL]``: crawls with the project's
settings, counting every call of stage 1 (``canonicalize``, wherever it is imported) and of
``dedupe_key``, and apart the keys parameter-rule learning computes for its evidence
(``learn_key``: a fetched page keyed again, without the learned rules, only on a host a
learned rule touches); prints
``{"canonicalize": n, "dedupe_key": n, "learn_key": n, "admitted": n}``. Run in a
subprocess: a Twisted reactor starts once per process.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from scrapy.crawler import CrawlerProcess
from scrapy.utils.project import get_project_settings

import bloom_frontier.canonical.rules
import bloom_frontier.frontier.keys
import bloom_frontier.learning.extension
import bloom_frontier.middlewares.redirects
import bloom_frontier.ssrf
from bloom_frontier.spiders.site import SiteSpider

calls: Counter[str] = Counter()


def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return function(*args, **kwargs)

    return wrapper


def main(start_url: str, store_url: str, redis_url: str = "") -> None:
    for module in (bloom_frontier.canonical.rules, bloom_frontier.ssrf):
        module.canonicalize = counted("canonicalize", module.canonicalize)  # type: ignore[attr-defined]
    # Every caller reaches dedupe_key through these module globals.
    original_key = bloom_frontier.canonical.rules.dedupe_key
    for module in (
        bloom_frontier.canonical.rules,
        bloom_frontier.middlewares.redirects,
        bloom_frontier.frontier.keys,
    ):
        module.dedupe_key = counted("dedupe_key", original_key)  # type: ignore[attr-defined]
    bloom_frontier.learning.extension.dedupe_key = counted("learn_key", original_key)  # type: ignore[attr-defined]
    settings = get_project_settings()
    settings.set("LOG_LEVEL", "WARNING")
    settings.set("STORE_URL", store_url)
    if redis_url:
        settings.set("REDIS_URL", redis_url)
    process = CrawlerProcess(settings)
    spider_crawler = process.create_crawler(SiteSpider)
    process.crawl(spider_crawler, start_url=start_url)
    process.start()
    assert spider_crawler.stats is not None
    admitted = spider_crawler.stats.get_value("seen/new", 0)
    print(json.dumps({"learn_key": 0, **calls, "admitted": admitted}))


if __name__ == "__main__":
    main(*sys.argv[1:])
