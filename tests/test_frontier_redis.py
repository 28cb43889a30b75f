"""The shared Redis frontier, against a real redis-server with RedisBloom: admission (seen
and queued atomically, once), leases (expiry, reclaim, heartbeat, refusal of a non-owner's
answer), failures with their reason, drain detection, priority order, Redis restarts."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot
from scrapy import Request, Spider
from scrapy.exceptions import DontCloseSpider, UsageError
from scrapy.http import JsonRequest
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

import bloom_frontier.defaults as project_defaults
import bloom_frontier.settings as project_settings
from bloom_frontier.commands.seed import Command as SeedCommand
from bloom_frontier.frontier.decode import record_url
from bloom_frontier.frontier.redis import FrontierKeys, RedisFrontier
from bloom_frontier.frontier.redis.state import queued_records
from bloom_frontier.frontier.scheduler import LeaseMiddleware, RedisScheduler
from bloom_frontier.meta import DEDUPE_KEY_META, FRONTIER_LEASE_META, FRONTIER_QUEUED_META
from tests.cluster import RedisClusterServers
from tests.crawls import site_crawl_command
from tests.httpserver import Page, TestServer, html, redirect
from tests.lease_clock import EXPIRING_LEASE_TTL, wait_until_expired
from tests.servers import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent


class ExampleSpider(Spider):
    name = "example"

    def parse(self, response: Any) -> None:
        """Default callback."""

    def parse_api(self, response: Any, page: int = 0) -> None:
        """Callback with cb_kwargs."""


#: The defaults table: what the add-on gives a crawl (components have no fallbacks of their own).
FRONTIER_SETTINGS = tuple(name for name in dir(project_defaults) if name.isupper())


def make_worker(redis_url: str, lease_ttl: float = 60.0) -> RedisFrontier:
    """One worker's view of the frontier, as a crawl with the project's settings makes it."""
    settings = {name: getattr(project_defaults, name) for name in FRONTIER_SETTINGS}
    settings.update(REDIS_URL=redis_url, FRONTIER_LEASE_TTL=lease_ttl)
    crawler = get_crawler(ExampleSpider, settings)
    spider = ExampleSpider.from_crawler(crawler)
    assert crawler.stats is not None
    return RedisFrontier.from_settings(crawler.settings, spider.name, crawler.stats, spider)


@pytest.fixture
def workers(redis_url: str) -> Iterator[list[RedisFrontier]]:
    made: list[RedisFrontier] = []

    def make(lease_ttl: float = 60.0) -> RedisFrontier:
        made.append(make_worker(redis_url, lease_ttl))
        return made[-1]

    yield make  # type: ignore[misc]
    for worker in made:
        worker.close()


def stat(worker: RedisFrontier, name: str) -> int:
    return worker.stats.get_value(name, 0)


def urls(requests: list[Request]) -> list[str]:
    return [request.url for request in requests]


def test_start_url_admitted_by_every_worker_is_queued_once(workers: Any) -> None:
    first, second = workers(), workers()
    start = "https://example.com/"
    assert urls(first.admit(None, [Request(start)])) == [start]
    assert second.admit(None, [Request(start)]) == []
    assert second.admit(None, [Request("https://EXAMPLE.com/?utm_source=x")]) == []
    assert first.counts()["queued"] == 1
    assert stat(second, "seen/duplicate") == 2


def test_admitted_requests_are_marked_so_the_scheduler_skips_them(workers: Any) -> None:
    worker = workers()
    [admitted] = worker.admit(None, [Request("https://example.com/a")])
    assert admitted.meta[FRONTIER_QUEUED_META] is True
    assert admitted.meta[DEDUPE_KEY_META]
    assert worker.enqueue(admitted) is True  # handed to the engine anyway: not queued again
    assert worker.counts()["queued"] == 1


def test_lease_hands_out_each_request_once_with_its_callback(workers: Any) -> None:
    first, second = workers(), workers()
    first.admit(
        None,
        [
            Request("https://example.com/", callback=first.spider.parse),
            JsonRequest(
                "https://example.com/api",
                data={"q": 1},
                callback=first.spider.parse_api,
                cb_kwargs={"page": 2},
            ),
        ],
    )
    leased = second.lease(10)
    assert urls(leased) == ["https://example.com/", "https://example.com/api"]
    assert leased[0].callback == second.spider.parse
    assert isinstance(leased[1], JsonRequest)
    assert leased[1].cb_kwargs == {"page": 2}
    assert all(FRONTIER_LEASE_META in request.meta for request in leased)
    assert first.lease(10) == []
    assert first.counts() | {"seen": 0} == {"queued": 0, "leased": 2, "failed": 0, "seen": 0}


def test_priority_order_then_first_in_first_out(workers: Any) -> None:
    worker = workers()
    worker.admit(
        None,
        [
            Request("https://example.com/low", priority=-1),
            Request("https://example.com/normal-1"),
            Request("https://example.com/high-1", priority=5),
            Request("https://example.com/normal-2"),
            Request("https://example.com/high-2", priority=5),
        ],
    )
    worker.admit(None, [Request("https://example.com/normal-3")])
    assert [request.url.rsplit("/", 1)[1] for request in worker.lease(3)] == [
        "high-1",
        "high-2",
        "normal-1",
    ]
    assert [request.url.rsplit("/", 1)[1] for request in worker.lease(10)] == [
        "normal-2",
        "normal-3",
        "low",
    ]


def test_answer_releases_the_lease_and_queues_the_links_atomically(workers: Any) -> None:
    worker = workers()
    worker.admit(None, [Request("https://example.com/")])
    [page] = worker.lease(1)
    links = [Request(f"https://example.com/{n}") for n in range(3)]
    links.append(Request("https://example.com/"))  # links back: already seen
    assert urls(worker.admit(page, links)) == urls(links[:3])
    assert worker.counts()["leased"] == 0
    assert worker.counts()["queued"] == 3
    assert stat(worker, "frontier/acked") == 1
    # A second answer for the same page has no lease left to release: its links are
    # admitted like any others, nothing else changes.
    assert urls(worker.admit(page, [Request("https://example.com/late")])) == [
        "https://example.com/late"
    ]
    assert worker.counts()["queued"] == 4
    assert stat(worker, "frontier/acked") == 1


def test_expired_lease_goes_to_another_worker_and_the_late_answer_is_refused(
    workers: Any,
) -> None:
    slow, other = workers(lease_ttl=EXPIRING_LEASE_TTL), workers(lease_ttl=EXPIRING_LEASE_TTL)
    slow.admit(None, [Request("https://example.com/")])
    [page] = slow.lease(1)
    assert other.lease(1) == []
    wait_until_expired(slow)
    [again] = other.lease(1)
    assert again.url == page.url
    assert stat(other, "frontier/reclaimed") == 1

    assert slow.admit(page, [Request("https://example.com/from-slow")]) == []
    assert stat(slow, "frontier/ack_refused") == 1
    assert other.counts()["queued"] == 0  # the refused answer's links were not admitted
    assert urls(other.admit(again, [Request("https://example.com/from-other")])) == [
        "https://example.com/from-other"
    ]
    assert other.counts() | {"seen": 0} == {"queued": 1, "leased": 0, "failed": 0, "seen": 0}


def test_late_answer_is_accepted_while_nobody_else_holds_the_request(workers: Any) -> None:
    slow, other = workers(lease_ttl=EXPIRING_LEASE_TTL), workers(lease_ttl=EXPIRING_LEASE_TTL)
    slow.admit(None, [Request("https://example.com/")])
    [page] = slow.lease(1)
    wait_until_expired(slow)
    other.lease(0)  # puts the expired lease back in the queue, leases nothing
    assert other.counts()["queued"] == 1
    assert urls(slow.admit(page, [Request("https://example.com/link")])) == [
        "https://example.com/link"
    ]
    [only] = other.lease(10)  # the page itself is gone from the queue: answered
    assert only.url == "https://example.com/link"


def test_heartbeat_keeps_a_live_workers_leases(workers: Any) -> None:
    busy, other = workers(lease_ttl=1.0), workers(lease_ttl=1.0)
    busy.admit(None, [Request("https://example.com/")])
    [page] = busy.lease(1)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        busy.heartbeat()
        assert other.lease(1) == []
        time.sleep(0.1)
    assert busy.answer_dropped(grace=0) == 0  # not downloaded yet: still worked on
    busy.left_downloader(page)
    assert busy.answer_dropped(grace=60) == 0
    # Left the downloader, and neither a response nor a failure nor a replacement came, at
    # two checks in a row: dropped on the way by a middleware, recorded rather than refetched.
    assert busy.answer_dropped(grace=0) == 0
    assert busy.answer_dropped(grace=0) == 1
    assert other.lease(1) == []
    [record] = busy.failures().values()
    assert record["reason"] == "dropped after its download (no response, no replacement, no error)"
    assert stat(busy, "frontier/unanswered") == 1


def test_heartbeat_keeps_leases_whose_delivery_has_not_reached_the_loop(workers: Any) -> None:
    # In a crawl the lease script runs in the background thread and its reply waits for the
    # loop, which may be busy for longer than a lease lives.
    busy, other = workers(lease_ttl=1.0), workers(lease_ttl=1.0)
    busy.admit(None, [Request("https://example.com/")])
    replies = busy.leases.lease_replies(1)  # granted in Redis, not yet taken by the loop
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        busy.heartbeat()
        assert other.lease(1) == []
        time.sleep(0.1)
    [page] = busy.leases.take_delivery(replies)
    assert page.url == "https://example.com/"
    busy.admit(page, [])
    assert busy.is_drained()
    assert stat(other, "frontier/reclaimed") == 0


def test_a_response_keeps_the_lease_for_its_page_batch(workers: Any) -> None:
    worker = workers()
    worker.admit(None, [Request("https://example.com/")])
    [page] = worker.lease(1)
    worker.left_downloader(page)
    # Overdue at one check (a loop stalled past the grace, its response not handled yet):
    # not dropped, the response comes before the next check.
    assert worker.answer_dropped(grace=0) == 0
    worker.responded(page)
    assert worker.answer_dropped(grace=0) == 0
    worker.admit(page, [])
    assert worker.is_drained()


def test_failure_is_recorded_with_its_reason_and_releases_the_lease(workers: Any) -> None:
    worker = workers()
    worker.admit(None, [Request("https://example.com/down", meta={"note": "x"})])
    [request] = worker.lease(1)
    worker.fail(request, "TimeoutError: took longer than 30 seconds")
    record = worker.failures()["https://example.com/down"]
    assert record["reason"] == "TimeoutError: took longer than 30 seconds"
    assert record["request"]["meta"]["note"] == "x"
    assert FRONTIER_LEASE_META not in record["request"]["meta"]
    assert worker.counts()["leased"] == 0
    assert worker.is_drained()


def test_drained_only_when_nothing_is_queued_nor_leased_anywhere(workers: Any) -> None:
    first, second = workers(), workers()
    assert first.is_drained()
    first.admit(None, [Request("https://example.com/")])
    assert not second.is_drained()
    [page] = first.lease(1)
    assert not second.is_drained()  # queue empty, but first may still find links
    first.admit(page, [Request("https://example.com/next")])
    assert not second.is_drained()
    [following] = second.lease(1)
    second.admit(following, [])
    assert first.is_drained()
    assert second.is_drained()


def test_redirect_takes_over_the_lease_but_links_do_not(workers: Any) -> None:
    worker = workers()
    worker.admit(None, [Request("https://example.com/old")])
    [old] = worker.lease(1)
    redirected = old.replace(url="https://example.com/new")  # meta (and lease id) copied
    assert worker.enqueue(redirected)
    assert worker.counts()["leased"] == 0  # the original's lease went with the redirect
    [new] = worker.lease(1)
    assert new.url == "https://example.com/new"
    worker.responded(new)  # its response reached the engine
    link = new.replace(url="https://example.com/linked", dont_filter=True)
    assert worker.enqueue(link)
    assert worker.counts()["leased"] == 1  # a link does not release the page's lease
    worker.admit(new, [])
    assert worker.counts() | {"seen": 0} == {"queued": 1, "leased": 0, "failed": 0, "seen": 0}


def test_retry_of_a_leased_request_is_queued_despite_the_seen_key(workers: Any) -> None:
    worker = workers()
    worker.admit(None, [Request("https://example.com/flaky")])
    [flaky] = worker.lease(1)
    retry = flaky.replace(dont_filter=True)
    retry.meta["retry_times"] = 1
    assert worker.enqueue(retry)
    [again] = worker.lease(1)
    assert again.url == flaky.url
    assert again.meta["retry_times"] == 1


def test_unkeyable_and_unserializable_links_are_dropped_with_a_count(workers: Any) -> None:
    worker = workers()
    admitted = worker.admit(
        None,
        [
            Request("https://example.com/ok"),
            Request("https://example.com/lambda", callback=lambda response: None),
            Request("https://example.com/object", meta={"selector": object()}),
            Request("http://exa mple.com/bad-host"),
        ],
    )
    assert urls(admitted) == ["https://example.com/ok"]
    assert stat(worker, "frontier/unserializable") == 2
    assert sum(v for k, v in worker.stats.get_stats().items() if "dupefilter/invalid/" in k) == 1
    assert worker.counts()["queued"] == 1


def test_keys_of_a_crawl_share_one_cluster_slot(workers: Any) -> None:
    worker = workers()
    assert {key_slot(key.encode()) for key in worker.keys.all} == {
        key_slot(worker.keys.queue.encode())
    }
    assert worker.keys.queue == "{example}:queue"


def test_answers_wait_while_redis_restarts_and_are_delivered_after() -> None:
    with RedisServer(bloom=True, appendonly=True) as server:
        worker = make_worker(server.url)
        worker.admit(None, [Request("https://example.com/")])
        [page] = worker.lease(1)
        server.kill()
        links = [Request("https://example.com/a"), Request("https://example.com/b")]
        assert urls(worker.admit(page, links)) == urls(links)  # verdict unknown yet
        assert worker.pending_answers == 1
        assert not worker.is_drained()
        server.start()
        assert worker.flush()
        assert worker.pending_answers == 0
        assert worker.counts() | {"seen": 0} == {"queued": 2, "leased": 0, "failed": 0, "seen": 0}
        assert worker.admit(None, [Request("https://example.com/")]) == []  # seen survived
        worker.close()


def scheduler_crawler(redis_url: str) -> Any:
    """A crawler configured like ``scrapy crawl example -s REDIS_URL=...``."""
    settings = {name: getattr(project_defaults, name) for name in FRONTIER_SETTINGS}
    settings.update(
        REDIS_URL=redis_url,
        ADDONS=project_settings.ADDONS,
        FRONTIER_LEASE_BATCH=project_defaults.FRONTIER_LEASE_BATCH,
        FRONTIER_LEASE_TTL=project_defaults.FRONTIER_LEASE_TTL,
    )
    return get_crawler(ExampleSpider, settings)


def test_redis_url_switches_the_scheduler_and_adds_the_lease_middleware(redis_url: str) -> None:
    with_redis = scheduler_crawler(redis_url).settings
    assert with_redis["SCHEDULER"] == "bloom_frontier.frontier.scheduler.RedisScheduler"
    assert LeaseMiddleware in with_redis.getdict("DOWNLOADER_MIDDLEWARES")
    without = get_crawler(ExampleSpider, {"ADDONS": project_settings.ADDONS}).settings
    assert without["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"


def lease_calls(redis_url: str) -> int:
    """Scripts run by the server so far (every lease attempt is one)."""
    with redis.Redis.from_url(redis_url) as client:
        stats = client.info("commandstats")
    return sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_evalsha", "cmdstat_eval"))


def test_waiting_worker_polls_gently_and_stays_open_until_the_frontier_drains(
    redis_url: str, workers: Any
) -> None:
    crawler = scheduler_crawler(redis_url)
    spider = ExampleSpider.from_crawler(crawler)
    crawler.spider = spider
    scheduler = RedisScheduler.from_crawler(crawler)
    scheduler.open(spider)
    other = workers()
    try:
        other.admit(None, [Request("https://example.com/")])
        [page] = other.lease(1)  # the only request, held by another worker
        before = lease_calls(redis_url)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert scheduler.next_request() is None
            time.sleep(0.001)
        assert lease_calls(redis_url) - before <= 8  # ~5 attempts in a second, not ~1000
        assert scheduler.has_pending_requests()  # the other worker may still find links
        with pytest.raises(DontCloseSpider):
            scheduler.spider_idle(spider)

        other.admit(page, [Request("https://example.com/next")])
        found, deadline = None, time.monotonic() + 2.0
        while found is None and time.monotonic() < deadline:
            found = scheduler.next_request()
            time.sleep(0.01)
        assert found is not None and found.url == "https://example.com/next"
        assert scheduler.has_pending_requests()  # this worker holds it
        scheduler.frontier.admit(found, [])
        assert not scheduler.has_pending_requests()
        scheduler.spider_idle(spider)  # drained: the spider may close
    finally:
        scheduler.close("finished")
        scheduler.frontier.close()


def test_seed_command_queues_each_url_once(redis_url: str, tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(
        "# start pages\nhttps://example.com/a\n\nhttps://example.com/b?utm_source=mail\n"
    )
    command = [
        str(ROOT / ".venv" / "bin" / "scrapy"),
        "seed",
        "site",
        "https://example.com/a",
        "https://example.com/b",
        "http://exa mple.com/",
        "not a url",
        "--file",
        str(seeds),
        "-s",
        f"REDIS_URL={redis_url}",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "2 queued, 2 already seen, 2 invalid" in result.stdout
    with redis.Redis.from_url(redis_url) as client:
        queued = queued_records(client, FrontierKeys.for_prefix("{site}"))
        stored = [record_url(record) for _lane, record in queued]
    assert stored == [
        "https://example.com/a",
        "https://example.com/b",
    ]


def test_seed_command_needs_redis() -> None:
    command = SeedCommand()
    command.settings = Settings({"REDIS_URL": None})
    with pytest.raises(UsageError, match="REDIS_URL"):
        command.run(["site", "https://example.com/"], argparse.Namespace(file=None))


def test_frontier_works_on_a_redis_cluster(redis_cluster: RedisClusterServers) -> None:
    redis_cluster.flushall()
    first, second = make_worker(redis_cluster.url), make_worker(redis_cluster.url)
    try:
        assert first.admit(None, [Request("https://example.com/")])
        assert second.admit(None, [Request("https://example.com/")]) == []
        [page] = second.lease(5)
        assert not first.is_drained()
        second.admit(page, [Request("https://example.com/a"), Request("https://example.com/b")])
        leased = first.lease(5)
        assert urls(leased) == ["https://example.com/a", "https://example.com/b"]
        first.fail(leased[0], "TimeoutError")
        first.admit(leased[1], [])
        assert first.is_drained()
        assert list(first.failures()) == ["https://example.com/a"]
    finally:
        first.close()
        second.close()


def test_request_whose_lease_keeps_expiring_is_given_up_with_the_reason(workers: Any) -> None:
    worker = workers(lease_ttl=0.05)
    worker.leases.max_expiries = 2
    worker.admit(None, [Request("https://example.com/kills-workers")])
    stuck = worker.lease(1)  # held, never answered nor extended: as if its worker hung
    time.sleep(0.1)
    stuck += worker.lease(1)  # first expiry: fetched again
    assert len(stuck) == 2
    time.sleep(0.1)
    assert worker.lease(1) == []  # second expiry: given up
    record = worker.failures()["https://example.com/kills-workers"]
    assert record["reason"] == "lease expired 2 times (workers killed or stalled on it)"
    assert record["request"]["url"] == "https://example.com/kills-workers"
    assert stat(worker, "frontier/given_up") == 1
    assert worker.counts()["leased"] == 0


def test_crawl_through_redis_answers_every_lease(redis_url: str, tmp_path: Path) -> None:
    """404s, 500s retried, redirects and unreachable links: the crawl ends (the frontier
    drains), each outcome is where a user would look for it."""
    closed_port = free_port()
    routes = {
        "/": html("/a", "/missing", "/error", "/moved", f"http://127.0.0.1:{closed_port}/x"),
        "/a": html("/"),
        "/error": Page("boom", status=500),
        "/moved": redirect("/b"),
        "/b": html("/a"),
    }
    with TestServer(routes) as site:
        store = tmp_path / "store.sqlite"
        command = site_crawl_command(f"{site.url}/", store, "-s", f"REDIS_URL={redis_url}")
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        hits = Counter(path for path in site.paths() if path != "/robots.txt")
    assert result.returncode == 0, result.stderr[-3000:]
    assert hits == {"/": 1, "/a": 1, "/missing": 1, "/error": 3, "/moved": 1, "/b": 1}
    with redis.Redis.from_url(redis_url) as client:
        assert client.zcard("{site}:queue") == 0
        assert client.zcard("{site}:leases") == 0
        failed = {
            url.decode(): json.loads(record)
            for url, record in client.hgetall("{site}:failed").items()
        }
    assert list(failed) == [f"http://127.0.0.1:{closed_port}/x"]
    assert "ConnectionRefused" in failed[f"http://127.0.0.1:{closed_port}/x"]["reason"]


def test_admissions_wait_while_redis_is_out_of_memory(workers: Any, redis_client: Any) -> None:
    worker = workers()
    redis_client.config_set("maxmemory", "1")  # less than in use: writes that grow are refused
    try:
        start = [Request("https://example.com/"), Request("https://example.com/b")]
        assert urls(worker.admit(None, start)) == urls(start)  # verdict unknown yet
        assert worker.pending_answers == 1
        assert stat(worker, "frontier/redis_unavailable") >= 1
        assert worker.counts()["queued"] == 0
    finally:
        redis_client.config_set("maxmemory", "0")
    assert worker.flush()
    assert urls(worker.lease(5)) == urls(start)


def test_closing_worker_gives_its_leases_back_to_the_queue(redis_url: str, workers: Any) -> None:
    crawler = scheduler_crawler(redis_url)
    crawler.spider = spider = ExampleSpider.from_crawler(crawler)
    scheduler = RedisScheduler.from_crawler(crawler)
    scheduler.open(spider)
    other = workers()
    other.admit(None, [Request(f"https://example.com/{n}") for n in range(3)])
    try:
        in_flight = scheduler.next_request()  # leases the three, hands out one
        assert in_flight is not None
        assert other.lease(5) == []
    finally:
        scheduler.close("shutdown")
        scheduler.frontier.close()
    assert sorted(urls(other.lease(5))) == [f"https://example.com/{n}" for n in range(3)]
    assert other.failures() == {}


def test_each_script_names_only_the_keys_it_uses_and_the_layout_documents_them() -> None:
    import bloom_frontier.frontier.redis.layout as layout
    from bloom_frontier.frontier.redis import SCRIPTS
    from bloom_frontier.frontier.redis.lua import script_keys

    every_key = FrontierKeys.names()
    for name in (*SCRIPTS, "turn", "waiting"):
        named = script_keys(name)
        assert set(named) <= set(every_key), name
        assert len(set(named)) == len(named) < len(every_key), name
    assert script_keys("heartbeat") == ("leases", "owners", "identity")
    assert "seen" not in script_keys("lease")
    # Every script of the frontier, whoever runs it, has a type for each key it names (its
    # type-check prelude is built from layout.KEY_TYPES).
    scripts = Path(layout.__file__).with_name("lua").glob("*.lua")
    for path in (path for path in scripts if path.read_text().startswith("-- KEYS:")):
        keys = script_keys(path.stem)
        assert set(keys) <= set(layout.KEY_TYPES), path.name
    documented = layout.__doc__ or ""
    assert all(f"\n{key} " in documented for key in every_key)


def test_the_layout_names_the_default_key_prefix_and_its_keys_under_it() -> None:
    import bloom_frontier.frontier.redis.layout as layout
    from bloom_frontier.defaults import FRONTIER_KEY_PREFIX

    default = FRONTIER_KEY_PREFIX % {"spider": "<spider>"}
    assert f"default\n``{default}``" in (layout.__doc__ or "")
    keys = FrontierKeys.for_prefix(FRONTIER_KEY_PREFIX % {"spider": "site"})
    assert keys.queue == "{site}:queue" and keys.prefix == "{site}"


def test_a_worker_knows_the_keys_redis_answered_it_and_only_those(workers: Any) -> None:
    """Links whose key is known are dropped before any record is built for them
    (SeenLinksMiddleware): keys an answer showed in the filter. A key another worker marked,
    or one of a refused answer, is not known: its admission decides."""
    first, second = workers(lease_ttl=EXPIRING_LEASE_TTL), workers(lease_ttl=EXPIRING_LEASE_TTL)
    first.admit(None, [Request("https://example.com/"), Request("https://example.com/a")])
    assert first.seen_before(Request("https://example.com/a?utm_source=x"))
    assert second.seen_before(Request("https://example.com/a")) is None  # first's key
    assert second.admit(None, [Request("https://example.com/a")]) == []  # Redis decides
    assert second.seen_before(Request("https://example.com/a"))  # and now it knows
    assert first.seen_before(Request("https://example.com/b")) is None

    # Refused (the page went to another worker): not known, the page's new holder decides.
    [page] = first.lease(1)
    wait_until_expired(first)
    [again] = second.lease(1)
    assert first.admit(page, [Request("https://example.com/b")]) == []
    assert stat(first, "frontier/ack_refused") == 1
    assert first.seen_before(Request("https://example.com/b")) is None
    assert urls(second.admit(again, [Request("https://example.com/b")])) == [
        "https://example.com/b"
    ]


def test_a_batchs_repeated_key_gets_no_record_and_counts_as_a_duplicate(workers: Any) -> None:
    worker = workers()
    links = [Request("https://example.com/r"), Request("https://example.com/r?utm_source=x")]
    assert urls(worker.admit(None, [*links, Request("https://example.com/s")])) == [
        "https://example.com/r",
        "https://example.com/s",
    ]
    assert stat(worker, "frontier/records_built") == 2
    assert stat(worker, "seen/duplicate") == 1
    assert worker.counts()["queued"] == 2
