"""The crawl's garbage-collector tuning: start-up's objects frozen, young ones collected in
larger batches, and the cyclic garbage a crawl makes still collected."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from bloom_frontier.gcfreeze import YOUNG_THRESHOLD, FreezeStartupObjects

ADDONS = {"bloom_frontier.Addon": 0}


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("restored_gc")
def test_startup_objects_are_frozen_and_the_crawls_garbage_still_collected() -> None:
    extension = FreezeStartupObjects.from_crawler(get_crawler(Spider, {"ADDONS": ADDONS}))
    before = gc.get_freeze_count()
    extension.spider_opened()
    assert gc.get_freeze_count() > before
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    cycles = [Cycle() for _ in range(3 * YOUNG_THRESHOLD)]
    alive = len(gc.get_objects())
    del cycles
    gc.collect()  # what a full pass during the crawl does: the frozen are not walked
    assert len(gc.get_objects()) <= alive - 3 * YOUNG_THRESHOLD


def test_it_can_be_switched_off() -> None:
    with pytest.raises(NotConfigured):
        FreezeStartupObjects.from_crawler(get_crawler(Spider, {"GC_FREEZE_ENABLED": False}))
