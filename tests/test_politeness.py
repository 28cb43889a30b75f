"""Global per-host politeness of the shared frontier, against a real redis-server with
RedisBloom: the lease script's rules (concurrency limit, delay on the server's clock, ready
hosts served past a waiting one, robots.txt Crawl-delay applied and capped), and four real
``scrapy crawl`` workers on one host, seen from the host's side."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
from scrapy import Request, Spider, signals
from scrapy.core.downloader import Downloader
from scrapy.robotstxt import ProtegoRobotParser
from scrapy.utils.test import get_crawler

import bloom_frontier.defaults as project_defaults
import bloom_frontier.settings as project_settings
from bloom_frontier.frontier.politeness import HostLimits, disable_local_delays
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.middlewares.politeness import GlobalPolitenessMiddleware
from bloom_frontier.services import CrawlServices, services_of
from tests.crawls import site_crawl_command
from tests.lease_clock import EXPIRING_LEASE_TTL, wait_until_expired
from tests.servers import RedisServer
from tests.sitegen import LinkGraph, serve
from tests.stalls import EXTENSIONS, longest_stall_ms

ROOT = Path(__file__).resolve().parent.parent

#: Project settings a worker's frontier reads; the tests override some of them.
#: The defaults table (the add-on's), and the project's own politeness settings.
FRONTIER_SETTINGS = {
    name: getattr(project_defaults, name) for name in dir(project_defaults) if name.isupper()
} | {
    name: getattr(project_settings, name)
    for name in ("CONCURRENT_REQUESTS_PER_DOMAIN", "USER_AGENT")
}


class ExampleSpider(Spider):
    name = "example"

    def parse(self, response: Any) -> None:
        """Default callback."""


def worker_crawler(redis_url: str, **overrides: Any) -> Any:
    """A crawler configured like ``scrapy crawl example -s REDIS_URL=... -s NAME=VALUE``."""
    settings = {
        **FRONTIER_SETTINGS,
        "EXTENSIONS": {CrawlServices: 0},
        "REDIS_URL": redis_url,
        "ROBOTSTXT_OBEY": True,
        **overrides,
    }
    return get_crawler(ExampleSpider, settings)


@pytest.fixture
def workers(redis_url: str) -> Iterator[Any]:
    """Makes workers' frontiers sharing the test's Redis, with setting overrides."""
    made: list[RedisFrontier] = []

    def make(**overrides: Any) -> RedisFrontier:
        crawler = worker_crawler(redis_url, **overrides)
        frontier = services_of(crawler).frontier
        assert isinstance(frontier, RedisFrontier)
        made.append(frontier)
        return frontier

    yield make
    for frontier in made:
        frontier.close()


def pages(host: str, *paths: str) -> list[Request]:
    return [Request(f"http://{host}/{path}") for path in paths]


def urls(requests: list[Request]) -> list[str]:
    return [request.url for request in requests]


def stat(frontier: RedisFrontier, name: str) -> Any:
    return frontier.stats.get_value(name, 0)


def test_requests_of_a_host_in_flight_stay_within_its_limit_across_workers(
    workers: Any,
) -> None:
    first, second = workers(FRONTIER_HOST_CONCURRENCY=2), workers(FRONTIER_HOST_CONCURRENCY=2)
    first.admit(None, [*pages("a.example", "1", "2", "3", "4"), *pages("b.example", "1")])
    held = first.lease(10)
    assert urls(held) == [
        "http://a.example/1",
        "http://a.example/2",
        "http://b.example/1",
    ]
    assert second.lease(10) == []  # a.example has 2 in flight: its limit, whoever asks
    assert second.politeness.hosts_waiting() == 1
    first.admit(held[0], [])  # answered: one fewer in flight
    held += second.lease(10)
    assert urls(held[3:]) == ["http://a.example/3"]
    first.fail(held[1], "TimeoutError")  # failed for good: one fewer too
    held += second.lease(10)
    assert urls(held[4:]) == ["http://a.example/4"]
    assert second.lease(10) == []
    assert second.politeness.hosts_waiting() == 1


def test_a_request_counts_against_its_host_only_until_its_download_ends(workers: Any) -> None:
    """Scrapy's per-domain limit counts downloads, not the parsing after them: a worker
    still handling a page (its lease held until the page's links are admitted) does not
    hold its host's turn."""
    first, second = workers(FRONTIER_HOST_CONCURRENCY=2), workers(FRONTIER_HOST_CONCURRENCY=2)
    first.admit(None, pages("a.example", "1", "2", "3", "4", "5"))
    held = first.lease(10)
    assert urls(held) == ["http://a.example/1", "http://a.example/2"]
    assert second.lease(10) == []
    first.left_downloader(held[0])  # downloaded; its page is being parsed
    held += second.lease(10)
    assert urls(held[2:]) == ["http://a.example/3"]  # one turn free, not two
    assert first.leases.holds(held[0].meta["frontier_lease"])  # the lease goes on
    assert second.lease(10) == []
    first.admit(held[0], [])  # answered after its download: frees nothing more
    assert second.lease(10) == []
    first.responded(held[1])  # a response reached the engine: its download is over too
    first.left_downloader(held[1])  # reported once
    held += second.lease(10)
    assert urls(held[3:]) == ["http://a.example/4"]
    assert second.lease(10) == []
    assert stat(first, "frontier/lease_lost") == 0


def test_a_download_reported_by_a_worker_no_longer_holding_it_frees_nothing(
    workers: Any,
) -> None:
    late = workers(FRONTIER_HOST_CONCURRENCY=1, FRONTIER_LEASE_TTL=EXPIRING_LEASE_TTL)
    other = workers(FRONTIER_HOST_CONCURRENCY=1, FRONTIER_LEASE_TTL=EXPIRING_LEASE_TTL)
    late.admit(None, pages("a.example", "1", "2"))
    stalled = late.lease(5)
    wait_until_expired(late)  # late stalls: its lease expires, another worker downloads it
    taken_over = other.lease(5)
    assert urls(taken_over) == ["http://a.example/1"]
    late.left_downloader(stalled[0])  # late's download ends after all
    assert other.lease(5) == []  # other's download still holds the host's only turn
    other.left_downloader(taken_over[0])
    assert urls(other.lease(5)) == ["http://a.example/2"]


def test_a_download_ended_rides_on_the_next_lease(workers: Any) -> None:
    """Reported with the next lease call when one comes first: no call of its own."""
    worker = workers(FRONTIER_HOST_CONCURRENCY=1)
    worker.admit(None, pages("a.example", "1", "2"))
    held = worker.lease(5)
    worker.reports = Mock()  # the reporting thread, not running: the lease comes first
    worker.left_downloader(held[0])
    worker.reports.wake.assert_called_once()
    assert urls(worker.lease(5)) == ["http://a.example/2"]  # the lease carried the report


def test_given_back_and_expired_leases_free_their_hosts_slots(workers: Any) -> None:
    quitting = workers(FRONTIER_HOST_CONCURRENCY=1, FRONTIER_LEASE_TTL=EXPIRING_LEASE_TTL)
    dying = workers(FRONTIER_HOST_CONCURRENCY=1, FRONTIER_LEASE_TTL=EXPIRING_LEASE_TTL)
    other = workers(FRONTIER_HOST_CONCURRENCY=1, FRONTIER_LEASE_TTL=EXPIRING_LEASE_TTL)
    quitting.admit(None, pages("a.example", "1", "2"))
    held = quitting.lease(5)
    assert urls(held) == ["http://a.example/1"]
    assert other.lease(5) == []
    assert quitting.release_all() == 1  # shutdown: given back
    stuck = dying.lease(5)
    assert urls(stuck) == ["http://a.example/1"]
    assert other.lease(5) == []
    wait_until_expired(dying)  # dying never answers: its lease expires, its slot with it
    held = other.lease(5)
    assert urls(held) == ["http://a.example/1"]
    assert stat(other, "frontier/reclaimed") == 1


def test_delay_spaces_a_hosts_leases_across_workers_on_the_server_clock(
    workers: Any,
) -> None:
    first, second = workers(DOWNLOAD_DELAY=0.3), workers(DOWNLOAD_DELAY=0.3)
    first.admit(None, pages("a.example", "1", "2", "3"))
    held = first.lease(5)
    assert len(held) == 1  # one per host per delay, even in one batch
    started = time.monotonic()
    assert second.lease(5) == []
    assert second.politeness.ready_in is not None
    assert 0.2 < second.politeness.ready_in <= 0.3
    leased: list[Request] = []
    deadline = started + 2.0
    while not leased and time.monotonic() < deadline:
        time.sleep(0.01)
        leased = second.lease(5)
    assert urls(leased) == ["http://a.example/2"]
    assert time.monotonic() - started >= 0.25


def test_ready_hosts_are_served_while_another_host_waits(workers: Any) -> None:
    first, second = workers(DOWNLOAD_DELAY=10), workers(DOWNLOAD_DELAY=10)
    first.admit(
        None,
        [*pages("slow.example", "1", "2", "3"), *pages("b.example", "1"), *pages("c.example", "1")],
    )
    held = first.lease(1)  # slow.example had its turn: its lane goes behind b's and c's
    held += second.lease(1)
    held += second.lease(5)  # slow.example/2 and /3 passed over
    assert urls(held) == ["http://slow.example/1", "http://b.example/1", "http://c.example/1"]
    assert first.lease(5) == []  # slow.example/2 and /3 passed over again
    assert second.politeness.hosts_waiting() == 3
    assert stat(second, "frontier/politeness_skipped") == 2
    assert stat(first, "frontier/politeness_skipped") == 2
    assert stat(first, "frontier/hosts_waiting") == 3


def test_a_lease_looks_only_at_the_first_lanes_of_the_queue(workers: Any) -> None:
    """A lease looks at FRONTIER_POLITENESS_SCAN lanes (one per host and priority level);
    a lane taken from goes to the back of its level, so the next lease reaches the next."""
    worker = workers(DOWNLOAD_DELAY=10, FRONTIER_POLITENESS_SCAN=2)
    worker.admit(
        None,
        [*pages("slow.example", "1", "2", "3", "4"), *pages("b.example", "1", "2")],
    )
    worker.admit(None, pages("c.example", "1"))
    held = worker.lease(5)
    # c.example/1 is ready, but its lane is the third: out of reach.
    assert urls(held) == ["http://slow.example/1", "http://b.example/1"]
    assert worker.counts()["queued"] == 5
    # slow.example and b.example had their turn: c.example's lane is now within reach.
    assert urls(worker.lease(5)) == ["http://c.example/1"]
    assert worker.counts()["queued"] == 4


@pytest.mark.parametrize(
    ("robots_txt", "expected"),
    [
        # Our user agent's group wins over '*'; the project's USER_AGENT is
        # "bloom-frontier/0.1 (+https://...)".
        (b"User-agent: bloom-frontier\nCrawl-delay: 0.5\n\nUser-agent: *\nCrawl-delay: 9\n", 0.5),
        (b"User-agent: *\nCrawl-delay: 3600\n", 0.8),  # capped by FRONTIER_MAX_CRAWL_DELAY
        (b"User-agent: *\nDisallow: /private\n", 0.2),  # none: DOWNLOAD_DELAY
    ],
)
def test_robots_txt_crawl_delay_spaces_every_workers_leases(
    redis_url: str, workers: Any, robots_txt: bytes, expected: float
) -> None:
    settings = {"DOWNLOAD_DELAY": 0.2, "FRONTIER_MAX_CRAWL_DELAY": 0.8}
    crawler = worker_crawler(redis_url, **settings)
    _middleware = GlobalPolitenessMiddleware.from_crawler(crawler)  # signals hold it weakly
    crawler.signals.send_catch_log(
        signals.robots_parsed,
        robotparser=ProtegoRobotParser.from_crawler(crawler, robots_txt),
        request=Request("http://a.example/1"),
    )
    services_of(crawler).frontier.close()
    other = workers(**settings)  # learns the delay from Redis, not from its own robots.txt
    other.admit(None, pages("a.example", "1", "2"))
    held = other.lease(5)
    assert len(held) == 1
    assert other.lease(5) == []
    assert other.politeness.ready_in is not None
    assert expected - 0.1 < other.politeness.ready_in <= expected


def test_one_worker_fetches_a_robots_txt_the_others_get_its_copy(workers: Any) -> None:
    first, second = workers(), workers()
    url = "http://a.example/robots.txt"
    assert first.politeness.claim_robots_txt(url, first.owner, 30)
    assert not second.politeness.claim_robots_txt(url, second.owner, 30)  # waits instead
    assert second.politeness.shared_robots_txt(url) is None
    body = b"User-agent: *\nDisallow: /private\n\xff"
    assert first.politeness.share_robots_txt(url, 200, body)
    assert second.politeness.shared_robots_txt(url) == (200, body)


def test_a_failed_robots_txt_fetch_lets_another_worker_try(workers: Any) -> None:
    first, second = workers(), workers()
    url = "http://a.example/robots.txt"
    assert first.politeness.claim_robots_txt(url, first.owner, 30)
    first.politeness.unclaim_robots_txt(url)
    assert second.politeness.claim_robots_txt(url, second.owner, 30)


def test_worker_keeps_no_download_delay_of_its_own(redis_url: str) -> None:
    slots = {"slow.example": {"delay": 2.0, "concurrency": 1}}
    crawler = worker_crawler(redis_url, DOWNLOAD_DELAY=0.5, DOWNLOAD_SLOTS=slots)
    limits = HostLimits.from_settings(crawler.settings)
    assert (limits.delay, limits.per_host) == (0.5, slots)  # applied by the frontier instead
    downloader = Downloader(crawler)
    _, early = downloader._get_slot(Request("http://early.example/"))
    disable_local_delays(downloader)
    assert early.delay == 0.0
    slots_of = []
    for url in ("http://a.example/", "http://slow.example/"):
        request = Request(url)
        # What the downloader does with each request: its slot, then the signal.
        key, slot = downloader._get_slot(request)
        request.meta["download_slot"] = key
        assert slot.delay > 0
        crawler.signals.send_catch_log(signals.request_reached_downloader, request=request)
        slots_of.append(slot)
    plain, slow = slots_of
    assert (plain.delay, slow.delay, slow.concurrency) == (0.0, 0.0, 1)


def test_invalid_politeness_settings_name_the_setting(redis_url: str) -> None:
    crawler = worker_crawler(redis_url, FRONTIER_POLITENESS_SCAN=-1)
    with pytest.raises(ValueError, match="FRONTIER_POLITENESS_SCAN"):
        HostLimits.from_settings(crawler.settings)


# --- four workers, one host ----------------------------------------------------------------

GRAPH = LinkGraph(pages=28)
DELAY = 0.5
#: How much longer than another's the way of a request from its turn (on Redis' clock) to
#: the host may take on an idle machine: Redis replies crossing to the worker's loop, the test
#: server's threads. A worker's loop stall adds to it (what it leased before the stall goes
#: out late, the next turn's request on time from another worker): the test allows the
#: longest stall the workers measured beside it.
TOLERANCE = 0.1
WORKERS = 4


def worst_shortfall(times: list[float], delay: float) -> float:
    """How far the host's requests at ``times`` (sorted) fell short of one per ``delay``:
    the most any run of k consecutive gaps is shorter than k delays (0.0: never)."""
    return max(
        [
            (j - i) * delay - (times[j] - times[i])
            for i, j in itertools.combinations(range(len(times)), 2)
        ],
        default=0.0,
    )


def crawl_with_workers(
    site_url: str, redis_url: str, tmp_path: Path, workers: dict[str, list[str]]
) -> tuple[list[int], dict[str, str]]:
    """Crawl ``site_url`` with a worker per entry of ``workers`` (its name, its own Scrapy
    arguments) at once on one shared frontier, each with a store of its own; their exit
    codes and logs, by name."""
    processes = []
    for name, arguments in workers.items():
        store = tmp_path / f"{name}.sqlite"
        command = site_crawl_command(
            f"{site_url}/p/0", store, "-s", f"REDIS_URL={redis_url}", *arguments
        )
        with (tmp_path / f"{name}.log").open("w") as log:
            processes.append(
                subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            )
    codes = [process.wait(timeout=180) for process in processes]
    return codes, {name: (tmp_path / f"{name}.log").read_text() for name in workers}


@pytest.mark.slow
def test_four_workers_hit_a_host_no_harder_than_one(tmp_path: Path) -> None:
    with RedisServer(bloom=True) as redis_server, serve(GRAPH) as site:
        workers = {
            f"w{number}": [
                "-s", f"DOWNLOAD_DELAY={DELAY}",
                "-s", "STATS_DUMP=True",  # read below: frontier/leased per worker
                "-s", f"EXTENSIONS={json.dumps(EXTENSIONS)}",  # loop stalls, read below
            ]
            for number in range(WORKERS)
        }  # fmt: skip
        codes, logs_by_name = crawl_with_workers(site.url, redis_server.url, tmp_path, workers)
        hits = sorted(site.hits, key=lambda hit: hit.time)
    logs = list(logs_by_name.values())
    assert codes == [0] * WORKERS, logs[0][-3000:]
    paths = [hit.path.partition("?")[0] for hit in hits]
    assert GRAPH.expected_paths() <= set(paths)
    # One worker fetched robots.txt for all (on a turn of its own, like any request).
    assert paths.count("/robots.txt") == 1

    times = [hit.time for hit in hits]
    closest = min(later - earlier for earlier, later in itertools.pairwise(times))
    shortfall = worst_shortfall(times, DELAY)
    stalls_ms = [longest_stall_ms(log) for log in logs]
    assert min(stalls_ms) >= 0, stalls_ms  # every worker measured its loop
    stalled = max(stalls_ms) / 1000
    print(
        f"{len(hits)} requests in {times[-1] - times[0]:.2f}s, closest two {closest:.3f}s "
        f"apart, worst shortfall {shortfall:.3f}s, longest worker loop stall {stalled:.3f}s"
    )
    # Any k consecutive requests are k delays apart, less the jitter (which does not add up:
    # one request late on its turn lengthens the gap before it as much as it shortens the
    # next). Four workers each keeping the delay on their own would fall 3/4 of a delay
    # short on every gap: ten gaps in a row, over 3 s short.
    assert shortfall <= TOLERANCE + stalled, [round(at - times[0], 3) for at in times]
    # The workers shared the crawl: the host was not merely left to one of them.
    leased = [
        int(m.group(1)) for log in logs for m in re.finditer(r"'frontier/leased': (\d+)", log)
    ]
    assert sum(count > 0 for count in leased) >= 2, leased


# --- two workers, one parsing slowly -------------------------------------------------------

#: Seconds the slow worker's loop is blocked by each response, as by a page that takes that
#: long to parse; and seconds the site takes to answer (so downloads overlap).
SLOW_PARSE, ANSWER_TIME = 1.0, 0.1
HOST_CONCURRENCY = 2


@pytest.mark.slow
def test_a_worker_slow_to_parse_does_not_hold_its_hosts_turns(
    redis_url: str, tmp_path: Path
) -> None:
    """Two workers, a crawl-wide limit of 2 downloads at once on the site's one host: never
    more than 2 requests reach the site at once, and a worker whose pages take a second
    each to parse (its loop blocked, as a CPU-bound worker's is) does not keep the other
    waiting: its requests count against the host while they download, not while parsed."""
    graph = LinkGraph(pages=40)
    with serve(graph, delay=ANSWER_TIME) as site:
        workers = {
            name: [
                "-s", f"FRONTIER_HOST_CONCURRENCY={HOST_CONCURRENCY}",
                "-s", f"USER_AGENT={name}",
                "-s", f"EXTENSIONS={json.dumps(extensions)}",
                "-s", f"LOOP_BLOCK_SECONDS={SLOW_PARSE}",
                "-s", "LOOP_BLOCK_AT=0",  # every response
            ]
            for name, extensions in (("slow", {"tests.slow_workers.LoopBlocker": 0}), ("fast", {}))
        }  # fmt: skip
        codes, logs = crawl_with_workers(site.url, redis_url, tmp_path, workers)
    assert codes == [0, 0], logs["slow"][-3000:]
    assert graph.expected_paths() <= {hit.path.partition("?")[0] for hit in site.hits}
    by_worker = {
        name: sum(hit.user_agent == name for hit in site.hits) for name in ("slow", "fast")
    }
    print(f"requests by worker {by_worker}, most at once {site.most_at_once}")
    assert site.most_at_once <= HOST_CONCURRENCY
    # Holding the host's two turns while it parses (a second a page), the slow worker kept
    # the fast one waiting and fetched most of the site itself; counting only downloads, the
    # fast worker gets the turns the slow one is not downloading with.
    assert by_worker["fast"] > 3 * by_worker["slow"], by_worker
