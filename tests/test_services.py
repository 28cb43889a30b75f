"""The crawl services: one instance of each per crawler, shared by every component, reached
through Scrapy's ``crawler.get_extension()``, and closed when the spider closes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.core.engine import ExecutionEngine
from scrapy.utils.test import get_crawler

from bloom_frontier.dupefilter import BloomDupeFilter
from bloom_frontier.frontier.memory import MemoryFrontier
from bloom_frontier.middlewares.linkbatch import BatchDedupeMiddleware
from bloom_frontier.middlewares.redirects import RedirectChainMiddleware
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import PageRecord
from bloom_frontier.services import CrawlServices, services_of
from tests.aio import run_on_own_loop

ADDONS = {"bloom_frontier.Addon": 0}
PAGE = "https://example.com/"


class ExampleSpider(Spider):
    name = "example"
    start_url = PAGE


def crawler_with(**settings: Any) -> Any:
    crawler = get_crawler(ExampleSpider, {"ADDONS": ADDONS, **settings})
    crawler.spider = ExampleSpider.from_crawler(crawler)
    return crawler


def test_a_component_without_the_services_says_what_to_enable() -> None:
    with pytest.raises(RuntimeError, match=r"^bloom_frontier.services.CrawlServices is not"):
        BloomDupeFilter.from_crawler(get_crawler(ExampleSpider))


def test_every_component_of_a_crawler_shares_its_services() -> None:
    crawler = crawler_with()
    crawler.engine = ExecutionEngine(crawler, lambda _: None)  # builds the middlewares
    services = crawler.get_extension(CrawlServices)
    assert services is not None and services_of(crawler) is services
    batch = crawler.get_spider_middleware(BatchDedupeMiddleware)
    redirects = crawler.get_downloader_middleware(RedirectChainMiddleware)
    assert batch.frontier is BloomDupeFilter.from_crawler(crawler).frontier
    assert batch.frontier is services.frontier and redirects.services is services
    assert services.recorder is services.recorder
    assert services.ssrf_policy.allows("example.com")  # the host it was started on
    assert services_of(crawler_with()).frontier is not services.frontier  # per crawler
    assert services.learner is not None
    assert crawler_with(CANON_LEARN="off").get_extension(CrawlServices).learner is None


def test_closing_persists_the_frontier_and_writes_every_record(tmp_path: Path) -> None:
    settings = {"JOBDIR": str(tmp_path / "job"), "STORE_URL": f"sqlite:///{tmp_path / 's.db'}"}
    crawler = crawler_with(**settings)
    services = services_of(crawler)
    assert services.frontier.admit(None, [Request(PAGE)])
    services.recorder.page(PageRecord(PAGE, PAGE, None, 200))
    closing = services.spider_closed()
    assert closing is not None
    run_on_own_loop(closing)
    stored = StoreReader.from_url(settings["STORE_URL"]).pages()
    assert [page["fetch_url"] for page in stored] == [PAGE]
    # The job directory's lock is released and its filter saved: the next crawl knows PAGE.
    again = MemoryFrontier.from_crawler(crawler_with(**settings))
    assert again.seen_link(PAGE, again.keyer.link_key(PAGE) or "")
    again.close()
