"""The crawl's garbage-collector tuning, watched in real crawls of a local site
(:mod:`tests.engine_probe`): start-up's objects frozen, young ones collected in larger
batches, and the cyclic garbage the crawl makes still collected, all without a test
calling the collector itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bloom_frontier.gcfreeze import YOUNG_THRESHOLD
from tests.engine_probe import CYCLES_PER_PAGE, probe
from tests.httpserver import Page, TestServer, html

PAGES = 40


def page(path: str) -> Page | None:
    """Page ``/pN`` (``/`` is 0) links to the next three."""
    number = 0 if path == "/" else int(path[2:]) if path[2:].isdigit() else None
    if number is None:
        return None
    return html(*(f"/p{later}" for later in range(number + 1, min(number + 4, PAGES))))


@pytest.fixture(scope="module")
def crawls() -> Iterator[dict[str, dict[str, Any]]]:
    """What the collector did in a crawl with the tuning and in one without."""
    with TestServer({"/*": page}) as site:
        yield {scenario: probe(scenario, site.url) for scenario in ("gc", "gc-off")}


def test_startup_objects_are_frozen_when_the_spider_opens(
    crawls: dict[str, dict[str, Any]],
) -> None:
    tuned = crawls["gc"]
    assert tuned["freeze_before"] == 0
    assert tuned["freeze_count"] > 10_000  # modules, classes, functions, settings...


def test_young_objects_are_collected_in_larger_batches(
    crawls: dict[str, dict[str, Any]],
) -> None:
    tuned, plain = crawls["gc"], crawls["gc-off"]
    assert tuned["threshold"] == YOUNG_THRESHOLD
    assert plain["threshold"] < YOUNG_THRESHOLD
    # Every collection during the crawl came by itself, once the threshold was passed.
    assert tuned["collections"]
    assert min(run["young"] for run in tuned["collections"]) >= YOUNG_THRESHOLD
    assert len(tuned["collections"]) * 5 < len(plain["collections"])


def test_the_crawls_cyclic_garbage_is_still_collected(
    crawls: dict[str, dict[str, Any]],
) -> None:
    """At most one batch of young objects waits for a collection when the spider closes."""
    for crawl in crawls.values():
        assert crawl["cycles"] == PAGES * CYCLES_PER_PAGE
    tuned = crawls["gc"]
    assert tuned["collected_cycles"] > tuned["cycles"] - YOUNG_THRESHOLD
    assert sum(run["collected"] for run in tuned["collections"]) >= tuned["collected_cycles"]


def test_switched_off_the_collector_is_left_as_python_has_it(
    crawls: dict[str, dict[str, Any]],
) -> None:
    plain = crawls["gc-off"]
    assert plain["freeze_count"] == 0
    assert plain["threshold"] == plain["threshold_before"]
    assert plain["collected_cycles"] > plain["cycles"] - plain["threshold"]
