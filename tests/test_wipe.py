"""A frontier whose state Redis lost is noticed (issue 24, items 2 and 4): Redis restarted
without persistence or flushed stops every worker with one line and a non-zero exit, never
"finished"; an evicting Redis is refused at start; a step past ``maxmemory`` is refused whole;
a fixed key of the wrong type is moved aside (the crawl goes on, or stops when it held
requests), and the commands say so in one line."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from scrapy import Request

from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.redis.identity import LOST_MARK
from bloom_frontier.frontier.redis.layout import KEY_TYPES, FrontierKeys
from bloom_frontier.frontier.redis.protocol import FrontierDamaged, FrontierLost
from bloom_frontier.meta import FRONTIER_LEASE_META
from tests.httpserver import Page, Route, TestServer, html
from tests.redirect_server import ROOT, SCRAPY, scrapy
from tests.servers import RedisServer
from tests.test_frontier_redis import make_worker, stat
from tests.test_quarantine import PAGES, site_routes

LOST_LINE = (
    "the frontier's state in Redis was lost: restarted without persistence, flushed or evicted"
)
SITE_KEYS = FrontierKeys.for_prefix("{site}")


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A RedisBloom server of the test's own, without persistence (to restart it empty)."""
    server = RedisServer(bloom=True).start()
    yield server
    server.close()


@pytest.fixture
def worker(redis_url: str) -> Iterator[RedisFrontier]:
    frontier = make_worker(redis_url)
    yield frontier
    frontier.close()


def crawl_worker(start_url: str, redis_url: str, store_url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SCRAPY, "crawl", "site", "-a", f"start_url={start_url}",
         "-s", f"REDIS_URL={redis_url}", "-s", f"STORE_URL={store_url}",
         "-s", "FRONTIER_LEASE_BATCH=2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def chain_routes(released: threading.Event) -> dict[str, Route]:
    """A root linking to ``/p0``, each page ``/pN`` to the next: PAGES fetches one after the
    other, the next-to-last answered only once ``released`` is set, so that the crawl cannot
    end before the test wiped its frontier, however late the test gets to it."""
    routes: dict[str, Route] = {"/": html("/p0"), f"/p{PAGES - 1}": html("/")}
    routes.update({f"/p{i}": html(f"/p{i + 1}") for i in range(PAGES - 2)})
    held = html(f"/p{PAGES - 1}")

    def next_to_last(_path: str) -> Page:
        released.wait(60)
        return held

    routes[f"/p{PAGES - 2}"] = next_to_last
    return routes


def wait_for(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def error_lines(log: str) -> list[str]:
    """The headlines of the log's lines saying the frontier's state is gone, one per line."""
    found = re.findall(r"\] ERROR: (the frontier's state in Redis was [^(]*) \(", log)
    return [headline.strip() for headline in found]


def stopped_lost(process: subprocess.Popen[str]) -> str:
    """``process`` (a worker) ended non-zero with the one line of a lost frontier; its log."""
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert error_lines(stderr) == [LOST_LINE], stderr[-3000:]
    assert re.search(r"finish reason: +frontier_lost", stderr), stderr[-3000:]
    assert stderr.count("] ERROR: ") == 1, stderr[-3000:]  # nothing else
    return stderr


# --- a wiped frontier stops every worker ---------------------------------------------------


@pytest.mark.parametrize("wipe", ["flushall", "restart without persistence"])
def test_a_wiped_frontier_stops_every_worker_with_one_line(
    wipe: str, own_redis: RedisServer, tmp_path: Path, pg_url: str
) -> None:
    """Before: both workers exited 0, "finished", with a third of the site."""
    wiped = threading.Event()
    with TestServer(chain_routes(wiped), delay=0.1) as site:
        workers = [crawl_worker(f"{site.url}/", own_redis.url, pg_url) for _ in range(2)]
        wait_for(lambda: len(site.paths()) >= 6)
        if wipe == "flushall":
            with own_redis.client() as client:
                client.flushall()
        else:
            own_redis.restart()
        wiped.set()
        for process in workers:
            stopped_lost(process)
        fetched = {path for path in site.paths() if path.startswith("/p")}
    assert len(fetched) < PAGES  # the crawl was incomplete: nobody may call it finished
    reset = scrapy("frontier", "site", "--reset", "--yes", "-s", f"REDIS_URL={own_redis.url}")
    assert reset.returncode == 0, reset.stderr  # the stopped workers hold nothing back


def test_redis_turned_evicting_during_the_crawl_stops_every_worker_with_one_line(
    own_redis: RedisServer, tmp_path: Path, pg_url: str
) -> None:
    """A policy that was refused at start, set while the crawl runs (``CONFIG SET``): every
    worker stops on its next heartbeat, before Redis evicts anything it needs. Before: exit
    0, "finished", with the keys Redis evicted (queue, lanes, seen keys) silently lost."""
    with TestServer(site_routes(), delay=1.0) as site:  # seconds of crawl left at the change
        workers = [crawl_worker(f"{site.url}/", own_redis.url, pg_url) for _ in range(2)]
        wait_for(lambda: len(site.paths()) >= 3)
        with own_redis.client() as client:
            client.config_set("maxmemory-policy", "allkeys-lru")
        logs = [stopped_lost(process) for process in workers]
    assert all("maxmemory-policy became allkeys-lru during the crawl" in log for log in logs)


def test_a_fresh_crawl_starts_and_a_reset_one_starts_again(redis_url: str, tmp_path: Path) -> None:
    """Nothing seeded: the first worker writes the crawl's identity and crawls to the end; a
    crawl a worker found damaged is refused until `scrapy frontier --reset`, then runs."""
    store = f"sqlite:///{tmp_path / 'crawl.sqlite'}"
    with TestServer(site_routes()) as site:
        first = crawl_worker(f"{site.url}/", redis_url, store)
        _, stderr = first.communicate(timeout=120)
        assert first.returncode == 0, stderr[-3000:]
        with redis.Redis.from_url(redis_url) as client:
            identity = client.get(SITE_KEYS.identity)
            assert identity and not identity.startswith(LOST_MARK.encode())
            client.set(SITE_KEYS.identity, f"{LOST_MARK}{{site}}:queue held a string")
        refused = scrapy("crawl", "site", "-a", f"start_url={site.url}/",
                         "-s", f"REDIS_URL={redis_url}", "-s", f"STORE_URL={store}")  # fmt: skip
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            "error: the frontier's state in Redis was damaged ({site}:queue held a string); "
            "the crawl is incomplete: reset it (scrapy frontier SPIDER --reset) and crawl again"
        ]
        status = scrapy("frontier", "site", "-s", f"REDIS_URL={redis_url}")
        assert status.returncode == 2 and status.stderr == refused.stderr
        reset = scrapy("frontier", "site", "--reset", "--yes", "-s", f"REDIS_URL={redis_url}")
        assert reset.returncode == 0, reset.stderr
        again = crawl_worker(f"{site.url}/", redis_url, store)
        _, stderr = again.communicate(timeout=120)
        assert again.returncode == 0, stderr[-3000:]
        assert Counter(site.paths())["/p0"] == 2  # crawled again from scratch


def test_every_worker_step_checks_the_crawls_identity(redis_url: str) -> None:
    """Two workers adopt one identity; after FLUSHALL a lease, an admission and a heartbeat
    each refuse (before, a lease found nothing and the crawl looked drained)."""
    first, second = make_worker(redis_url), make_worker(redis_url)
    try:
        assert first.scripts.identity == second.scripts.identity != ""
        first.admit(None, [Request("https://example.com/"), Request("https://example.com/b")])
        [page] = second.lease(1)
        first.client.flushall()
        with pytest.raises(FrontierLost, match="identity is missing"):
            first.lease(1)
        with pytest.raises(FrontierLost):
            second.admit(page, [Request("https://example.com/c")])
        assert first.client.dbsize() == 0  # nothing written into the wiped Redis
        with pytest.raises(FrontierLost):
            second.leases.extend([page.meta[FRONTIER_LEASE_META]])
        assert not first.is_drained()
    finally:
        first.close()
        second.close()


# --- memory ------------------------------------------------------------------------------------


def test_an_evicting_redis_is_refused_at_start_unless_allowed(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.config_set("maxmemory-policy", "allkeys-lru")
        try:
            seeded = scrapy("seed", "site", "https://example.com/", "-s", f"REDIS_URL={redis_url}")
            crawled = scrapy("crawl", "site", "-a", "start_url=https://example.com/",
                             "-s", f"REDIS_URL={redis_url}")  # fmt: skip
            allowed = scrapy("seed", "site", "https://example.com/", "-s", f"REDIS_URL={redis_url}",
                             "-s", "FRONTIER_ALLOW_EVICTION=True")  # fmt: skip
        finally:
            client.config_set("maxmemory-policy", "noeviction")
    for refused in (seeded, crawled):
        assert refused.returncode == 2
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith("error: Redis at redis://127.0.0.1:"), line
        assert "(maxmemory-policy allkeys-lru)" in line and "FRONTIER_ALLOW_EVICTION" in line
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.startswith("1 queued")


def test_a_step_past_maxmemory_is_refused_whole_and_retried(
    worker: RedisFrontier, caplog: pytest.LogCaptureFixture
) -> None:
    """Under noeviction a step that began past maxmemory wrote on (its first write, a ZREM,
    needs no memory): 1,000 links queued past the limit. Now it is refused whole: the page
    keeps its lease, nothing is queued, the answer waits and lands once memory is freed."""
    client = worker.client
    worker.admit(None, [Request("https://example.com/")])
    [page] = worker.lease(1)
    links = [Request(f"https://example.com/{i}/{'x' * 200}") for i in range(1000)]
    used = client.info("memory")["used_memory"]
    client.config_set("maxmemory", used // 2)
    try:
        worker.admit(page, links)
        assert not worker.flush()  # waiting, not dropped
        assert client.zcard(worker.keys.leases) == 1 and client.zcard(worker.keys.queue) == 0
        assert "OOM" in caplog.text or "maxmemory" in caplog.text
    finally:
        client.config_set("maxmemory", 0)
    assert worker.flush()
    assert client.zcard(worker.keys.leases) == 0
    assert int(client.get(worker.keys.queued)) == len(links)


def test_memory_close_to_maxmemory_is_reported_at_start(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        used = client.info("memory")["used_memory"]
        client.config_set("maxmemory", int(used * 1.05))
        try:
            seeded = scrapy("seed", "site", "https://example.com/", "-s", f"REDIS_URL={redis_url}")
        finally:
            client.config_set("maxmemory", 0)
    assert "of its maxmemory" in seeded.stderr, seeded.stderr


# --- keys of the wrong type ----------------------------------------------------------------------


def test_a_politeness_key_of_the_wrong_type_is_moved_aside_and_leasing_goes_on(
    worker: RedisFrontier, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: `host_busy` as a string refused every lease, forever."""
    client, keys = worker.client, worker.keys
    worker.admit(None, [Request("https://example.com/"), Request("https://example.com/b")])
    client.set(keys.host_busy, "not a hash")
    assert len(worker.lease(2)) == 2
    [aside] = client.keys(f"{keys.host_busy}:foreign:*")
    assert client.get(aside) == b"not a hash"  # kept for a look
    assert f"{keys.host_busy} held a string, not a hash (moved aside to {aside.decode()})" in (
        caplog.text
    )
    assert client.type(keys.host_busy) in (b"hash", b"none")


def test_every_politeness_key_of_the_wrong_type_is_moved_aside(worker: RedisFrontier) -> None:
    """Keys only the politeness scripts and commands touch (a backoff's pause, the strikes)
    are moved aside too, by the heal script, which names every fixed key."""
    from bloom_frontier.frontier.redis.lua import script_keys

    assert set(script_keys("heal")) == set(FrontierKeys.names())
    client, keys = worker.client, worker.keys
    client.set(keys.host_paused, "x")
    client.rpush(keys.host_strikes, "x")
    assert worker.politeness.pause("example.com", 5) == pytest.approx(5, abs=1)
    assert worker.politeness.strike("example.com") == 1
    assert len(client.keys(f"{keys.prefix}:host_*:foreign:*")) == 2


def test_a_seen_filter_of_the_wrong_type_stops_the_crawl_and_the_next_start(
    worker: RedisFrontier, redis_url: str
) -> None:
    """Before: `seen` as a string refused every admission, so each page's lease expired and
    was fetched again, 5 times, then given up; the crawl exited 0."""
    assert set(FrontierKeys.names()) <= set(KEY_TYPES)  # every fixed key is checked
    client, keys = worker.client, worker.keys
    other = make_worker(redis_url)
    worker.admit(None, [Request("https://example.com/"), Request("https://example.com/b")])
    [page] = worker.lease(1)
    client.delete(keys.seen)
    client.set(keys.seen, "not a filter")
    with pytest.raises(FrontierDamaged, match=r"\{example\}:seen held a string, not a MBbloom"):
        worker.admit(page, [Request("https://example.com/child")])
    assert client.zcard(keys.leases) == 1  # the page keeps its lease: nothing half-done
    assert client.get(keys.identity).startswith(LOST_MARK.encode())
    [aside] = client.keys(f"{keys.seen}:foreign:*")
    assert client.get(aside) == b"not a filter"
    try:
        with pytest.raises(FrontierDamaged, match="seen held a string"):
            other.lease(1)  # every step of every worker refuses now
    finally:
        other.close()
    with pytest.raises(FrontierDamaged, match="seen held a string"):
        make_worker(redis_url)  # nor does a worker start on it


def test_a_crawl_meeting_an_overwritten_seen_filter_stops_with_one_line(
    redis_url: str, pg_url: str
) -> None:
    with TestServer(site_routes(), delay=0.1) as site, redis.Redis.from_url(redis_url) as client:
        process = crawl_worker(f"{site.url}/", redis_url, pg_url)
        wait_for(lambda: len(site.paths()) >= 4)
        client.delete(SITE_KEYS.seen)
        client.set(SITE_KEYS.seen, "x")
        _, stderr = process.communicate(timeout=120)
        hits = Counter(site.paths())
    assert process.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    assert error_lines(stderr) == ["the frontier's state in Redis was damaged"], stderr[-3000:]
    assert "ERROR: the frontier's state in Redis was damaged ({site}:seen held a string" in stderr
    assert stderr.count("] ERROR: ") == 1, stderr[-3000:]  # nothing else
    assert max(hits.values()) == 1  # no page fetched again and again


@pytest.mark.parametrize(
    ("key", "command"),
    [
        ("host_busy", ()),
        ("quarantine", ("--quarantine",)),
        ("queued", ("--json",)),
    ],
)
def test_the_frontier_command_reports_a_key_of_the_wrong_type_in_one_line(
    redis_url: str, key: str, command: tuple[str, ...]
) -> None:
    """Before: a traceback."""
    worker = make_worker(redis_url)  # the crawl `example`: the command reads `site`
    worker.close()
    with redis.Redis.from_url(redis_url) as client:
        client.sadd(getattr(SITE_KEYS, key), "x")
    result = scrapy("frontier", "site", *command, "-s", f"REDIS_URL={redis_url}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: the frontier's state in Redis was damaged ({{site}}:{key} held a set, not a "
        f"{'string' if key == 'queued' else 'hash'}); a worker moves it aside (and stops if "
        "it held requests)"
    ]


def test_seed_reports_a_damaged_frontier_in_one_line(redis_url: str) -> None:
    """Before: "0 queued", exit 0, its admission dropped."""
    with redis.Redis.from_url(redis_url) as client:
        client.set(SITE_KEYS.seen, "x")
    result = scrapy("seed", "site", "https://example.com/", "-s", f"REDIS_URL={redis_url}")
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: the frontier's state in Redis was damaged ({site}:seen held")


def test_seed_heals_a_count_of_the_wrong_type(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.hset(SITE_KEYS.queued, "x", 1)
        result = scrapy("seed", "site", "https://example.com/", "-s", f"REDIS_URL={redis_url}")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("1 queued")
        assert "{site}:queued held a hash, not a string (moved aside" in result.stderr
        assert client.zcard(SITE_KEYS.queue) == 1


def test_a_lost_frontier_is_raised_once_without_a_crawler(worker: RedisFrontier) -> None:
    """A worker without a crawler (a command's) raises the loss once; later answers meeting
    it are dropped quietly, and the crawl never looks drained."""
    worker.admit(None, [Request("https://example.com/"), Request("https://example.com/b")])
    first, second = worker.lease(2)
    worker.client.flushall()
    with pytest.raises(FrontierLost):
        worker.admit(first, [])
    worker.admit(second, [])
    assert worker.flush()
    assert stat(worker, "frontier/lost") == 1
    assert worker.lease(1) == [] and not worker.is_drained()
