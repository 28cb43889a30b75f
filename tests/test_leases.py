"""Leases are answered by what happens to their request, never by the garbage collector nor
by waiting for them to expire: a crawl whose callbacks all raise and whose middleware
ignores requests ends as soon as its pages are handled."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred, maybeDeferred

from bloom_frontier.frontier.redis.outbox import Answer, Outbox
from tests.httpserver import TestServer, html
from tests.stalls import EXTENSIONS as STALL_EXTENSIONS
from tests.stalls import crawl_with_hang, lock_store

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = str(ROOT / ".venv" / "bin" / "scrapy")
#: Far longer than the crawl may take: a lease left to expire would show.
LEASE_TTL = 60
#: The add-on installs its own middlewares beside the ones a project lists.
MIDDLEWARES = {"tests.spiders.failing.IgnoringMiddleware": 500}


def test_raising_callbacks_and_ignored_requests_answer_their_leases_at_once(
    redis_url: str, tmp_path: Path
) -> None:
    routes = {
        "/": html("/a", "/raise-first/b", "/ignored/c", "/dropped/d"),
        "/a": html("/raise-first/e", "/"),
        "/raise-first/b": html("/never-followed"),
        "/raise-first/e": html(),
        "/dropped/d": html(),
    }
    with TestServer(routes) as site:
        command = [
            SCRAPY, "crawl", "failing",
            "-s", "SPIDER_MODULES=tests.spiders",
            "-s", f"DOWNLOADER_MIDDLEWARES={json.dumps(MIDDLEWARES)}",
            "-a", f"start_url={site.url}/",
            "-s", f"REDIS_URL={redis_url}",
            "-s", f"FRONTIER_LEASE_TTL={LEASE_TTL}",
            "-s", "FRONTIER_HOST_CONCURRENCY=1",
            "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=1",
            "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}",
            "-s", "ROBOTSTXT_OBEY=False",
            "-s", "SSRF_GUARD_ENABLED=False",
            "-s", "STATS_DUMP=True",  # read below: the add-on turns Scrapy's dump off
        ]  # fmt: skip
        started = time.monotonic()
        result = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=4 * LEASE_TTL
        )
        took = time.monotonic() - started
        hits = Counter(site.paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert took < LEASE_TTL / 2, result.stderr[-3000:]
    assert hits == {"/": 1, "/a": 1, "/raise-first/b": 1, "/raise-first/e": 1, "/dropped/d": 1}
    assert "'spider_exceptions/ValueError': 4" in result.stderr
    assert "frontier/reclaimed" not in result.stderr
    with redis.Redis.from_url(redis_url) as client:
        assert client.zcard("{failing}:queue") == client.zcard("{failing}:leases") == 0
        failed = {
            url.decode(): json.loads(record)["reason"]
            for url, record in client.hgetall("{failing}:failed").items()
        }
    assert failed == {
        f"{site.url}/ignored/c": "IgnoreRequest: ignored by the test's middleware",
        f"{site.url}/dropped/d": (
            "dropped after its download (no response, no replacement, no error)"
        ),
    }


#: Short leases: a heartbeat every 0.67 s keeps them, and one missed shows within seconds.
SHORT_LEASE_TTL = 2.0
SLOW_RECORDS = {"tests.slow_workers.SlowRecordCommits": 0, **STALL_EXTENSIONS}
LOOP_BLOCKER = {"tests.slow_workers.LoopBlocker": 0, **STALL_EXTENSIONS}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hang", "page_delay", "settings"),
    [
        # Every page's records take longer to commit than a lease lives, and its answer
        # waits for them in the outbox: its lease must be extended meanwhile.
        (None, 0.05, {"EXTENSIONS": json.dumps(SLOW_RECORDS), "SLOW_RECORDS_SECONDS": "3"}),
        # The same, behind a record store locked for 5 s.
        (lock_store, 0.05, {}),
        # The loop blocked for longer than a lease lives, with requests in flight.
        (
            None,
            0.5,
            {
                "EXTENSIONS": json.dumps(LOOP_BLOCKER),
                "LOOP_BLOCK_SECONDS": "3",
                "LOOP_BLOCK_AT": "10",
                "CONCURRENT_REQUESTS": "16",
            },
        ),
        # Downloads slower than a lease lives, with many leased requests in the downloader
        # at once (and more queued behind them): each is extended while it waits.
        (None, 3.0, {"CONCURRENT_REQUESTS": "16", "FRONTIER_HOST_CONCURRENCY": "64"}),
    ],
    ids=["slow-record-commits", "store-locked", "loop-blocked", "slow-downloads"],
)
def test_a_living_worker_never_loses_a_lease(
    tmp_path: Path, hang: object, page_delay: float, settings: dict[str, str]
) -> None:
    crawl = crawl_with_hang(
        tmp_path,
        hang,  # type: ignore[arg-type]
        pages=40,
        page_delay=page_delay,
        lease_ttl=SHORT_LEASE_TTL,
        settings=settings,
    )
    assert crawl.returncode == 0, crawl.log[-3000:]
    assert crawl.every_page_fetched, sorted(crawl.expected - set(crawl.paths))
    fetched_twice = {path: n for path, n in Counter(crawl.paths).items() if n > 1}
    assert fetched_twice == {}, crawl.log[-3000:]
    assert "frontier/reclaimed" not in crawl.log
    assert "frontier/lease_lost" not in crawl.log
    assert "expired before their heartbeat" not in crawl.log
    # The heartbeat kept its rhythm (a third of the TTL), whatever the loop was doing.
    gap = re.search(r"'frontier/heartbeat_longest_gap_ms': (\d+)", crawl.log)
    assert gap is not None, crawl.log[-3000:]
    assert int(gap.group(1)) < SHORT_LEASE_TTL * 1000 / 2


class InlineThread:
    """Stands in for the frontier's background thread: runs each call at once."""

    def run(self, function: Any, *args: Any) -> Deferred[Any]:
        return maybeDeferred(function, *args)


def test_an_answer_waits_for_its_records_and_keeps_its_lease_meanwhile() -> None:
    delivered: list[str] = []
    outbox = Outbox(StatsCollector(get_crawler()), InlineThread())  # type: ignore[arg-type]
    committed: Deferred[None] = Deferred()

    def answer(name: str, after: Deferred[None] | None = None) -> Answer:
        return Answer(name, partial(delivered.append, name), lambda _: True, after, lease=name)

    outbox.send(answer("page", after=committed))
    outbox.send(answer("next page"))
    outbox.flush()  # as the scheduler's heartbeat does
    assert delivered == []  # not before the page's records are committed, nor past it
    assert outbox.leases() == ["page", "next page"]  # still this worker's: heartbeated
    committed.callback(None)
    assert delivered == ["page", "next page"]
    assert outbox.leases() == []
