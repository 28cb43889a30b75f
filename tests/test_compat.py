"""Each Scrapy internal :mod:`bloom_frontier.compat` uses, on a real engine in a real crawl
(:mod:`tests.engine_probe`): it exists and does what the project needs, so a Scrapy release
that changes one fails here (also on the oldest supported Scrapy: ``make test-min``)."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy import Spider
from scrapy.core.downloader import Downloader
from scrapy.core.engine import ExecutionEngine
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from bloom_frontier import compat
from tests.engine_probe import (
    CONCURRENT_REQUESTS,
    DOWNLOAD_DELAY,
    HEARTBEAT,
    HOLD_FOR,
    WAKE_AFTER,
    probe,
)
from tests.httpserver import TestServer, html


@pytest.fixture(scope="module")
def seen() -> dict[str, Any]:
    with TestServer({"/a": html(), "/b": html(), "/c": html()}) as site:
        seen = probe("internals", site.url)
        seen["hits"] = {hit.path: hit.time for hit in site.hits}
    return seen


def test_the_crawl_used_every_internal_without_a_warning(seen: dict[str, Any]) -> None:
    assert set(seen["hits"]) == {"/a", "/b", "/c"}
    assert seen["warnings"] == []


def test_waking_the_engine_has_it_ask_the_scheduler_at_once(seen: dict[str, Any]) -> None:
    """A request put in the scheduler behind the engine's back waits until the engine is
    woken, then leaves at once: not at the engine's next heartbeat, seconds later."""
    assert seen["dequeued"]["b"] > seen["woken"] >= seen["queued"] + WAKE_AFTER
    assert seen["dequeued"]["b"] - seen["woken"] < 0.5 < HEARTBEAT


def test_download_slots_are_the_downloaders_own(seen: dict[str, Any]) -> None:
    assert seen["slots"] == {"127.0.0.1": DOWNLOAD_DELAY}


def test_holding_a_download_slot_holds_its_requests_then_lets_them_go(
    seen: dict[str, Any],
) -> None:
    waited = seen["hits"]["/c"] - seen["held"]
    assert HOLD_FOR <= waited + 0.01 < HOLD_FOR + 1.0


def test_download_room_is_what_the_downloader_can_still_start(seen: dict[str, Any]) -> None:
    assert seen["room"] == CONCURRENT_REQUESTS - 1  # /a is downloading


def test_download_room_without_a_limit_is_none() -> None:
    crawler = get_crawler(Spider, {"CONCURRENT_REQUESTS": 0})
    assert compat.download_room(Downloader(crawler)) is None


def test_the_asyncio_reactor_path_is_scrapys_default_reactor() -> None:
    assert compat.asyncio_reactor_path() == Settings()["TWISTED_REACTOR"]
    assert compat.asyncio_reactor_path() == "twisted.internet.asyncioreactor.AsyncioSelectorReactor"


def test_an_engine_without_the_internal_warns_instead_of_slowing_down_silently() -> None:
    """What a Scrapy that renamed ``ExecutionEngine._slot`` would do to the shared crawl."""
    crawler = get_crawler(Spider)
    engine = ExecutionEngine(crawler, lambda _: None)
    compat.wake_engine(engine)  # no spider open yet: nothing to wake, nothing to say
    del engine._slot
    with pytest.warns(compat.ScrapyInternalsChanged, match=r"_slot\.nextcall.*5 s heartbeat"):
        compat.wake_engine(engine)


def test_scrapys_cookie_domains_are_judged_offline() -> None:
    from scrapy.downloadermiddlewares import cookies

    compat.offline_cookie_domains()
    assert cookies._split_domain.suffix_list_urls == ()
    assert cookies._is_public_domain("co.uk") and not cookies._is_public_domain("example.co.uk")
