"""No stored message can stall the shared frontier: what a worker cannot decode goes to
quarantine with its reason, the requests leased with it go on, no Lua script fails on a
stored payload, and the quarantine can be listed, requeued and dropped."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

import bloom_frontier.defaults as project_defaults
from bloom_frontier.frontier.redis import RedisFrontier, quarantine
from bloom_frontier.frontier.redis.layout import FrontierKeys, lane_rank
from tests.httpserver import Page, TestServer, html
from tests.redirect_server import ROOT, SCRAPY, scrapy
from tests.test_decode import ShopCrawlSpider
from tests.test_frontier_redis import FRONTIER_SETTINGS, ExampleSpider, make_worker, stat

#: Stored requests a writer to the crawl's keys could leave, with the reason each gets.
POISONS: dict[str, tuple[bytes, str]] = {
    "deep meta": (
        b'{"url":"https://example.com/deep","meta":{"x":' + b"[" * 5000 + b"]" * 5000 + b"}}",
        "nested",
    ),
    "bogus encoding": (
        b'{"url":"https://example.com/enc","encoding":"bogus-enc"}',
        "not a known codec",
    ),
    "dunder callback": (
        b'{"url":"https://example.com/init","callback":"__init__",'
        b'"cb_kwargs":{"name":"pwned","crawler":null}}',
        "special method",
    ),
    "class import": (b'{"url":"https://example.com/cls","_class":"this.x"}', "not allowed"),
    "not json": (b"{not json", "not JSON"),
    "not utf-8": (b'{"url":"https://example.com/\xff"}', "UTF-8"),
    "huge url": (b'{"url":"https://example.com/' + b"a" * 2_000_000 + b'"}', "more than"),
}


def inject(client: redis.Redis, keys: FrontierKeys, payload: bytes, score: int = 0) -> str:
    """Queue ``payload`` as a producer with write access to the crawl's keys could, in the
    form a request requeued after its lease expired takes (its record kept under its id, a
    reference at the front of its lane), so its quarantine record is told by that id."""
    request_id = f"{client.incr(keys.seq):014x}"
    lane = f"{score}|"
    with client.pipeline(transaction=True) as pipe:  # queued with its payload, at once
        pipe.hset(keys.requests, request_id, payload).hset(keys.lanes, request_id, lane)
        pipe.rpush(keys.lane(lane), f"#{request_id}").incr(keys.queued)
        pipe.zadd(keys.queue, {lane: lane_rank(score, 0)}, nx=True).execute()
    return request_id


def frontier_of(
    redis_url: str, spidercls: type[Spider] = ExampleSpider, name: str = "site"
) -> tuple[RedisFrontier, Spider]:
    """A worker's frontier of the crawl ``name`` (``site``: the project's spider, whose
    frontier `scrapy frontier site` reads), with a ``spidercls`` spider, project settings."""
    settings = {setting: getattr(project_defaults, setting) for setting in FRONTIER_SETTINGS}
    settings.update(REDIS_URL=redis_url, FRONTIER_LEASE_TTL=60.0)
    crawler = get_crawler(spidercls, settings)
    assert crawler.stats is not None
    spider = spidercls.from_crawler(crawler)
    return RedisFrontier.from_settings(crawler.settings, name, crawler.stats, spider), spider


@pytest.fixture
def worker(redis_url: str) -> Iterator[RedisFrontier]:
    frontier = make_worker(redis_url)
    yield frontier
    frontier.close()


def test_each_poison_is_quarantined_and_its_lease_batch_siblings_leased(
    worker: RedisFrontier,
) -> None:
    good = [Request(f"https://example.com/p{i}") for i in range(len(POISONS) + 1)]
    poisons = {}
    for request, (name, (payload, _)) in zip(good, POISONS.items(), strict=False):
        worker.admit(None, [request])
        poisons[inject(worker.client, worker.keys, payload)] = name
    worker.admit(None, [good[-1]])

    started = time.monotonic()
    leased = worker.lease(50)
    assert time.monotonic() - started < 5  # nothing parsed a 2 MB payload, nothing hung
    assert sorted(r.url for r in leased) == sorted(r.url for r in good)
    for request in leased:  # each page answered: its lease released
        worker.admit(request, [])
    assert worker.is_drained()
    assert worker.failures() == {}
    assert worker.client.hlen(worker.keys.expiries) == 0  # nobody's retries counted

    records = {r["id"]: r for r in quarantine.records(worker.client, worker.keys)}
    assert set(records) == set(poisons)
    for request_id, name in poisons.items():
        assert POISONS[name][1] in records[request_id]["reason"], name
        assert records[request_id]["quarantined_at"] == pytest.approx(time.time(), abs=60)
    assert records[next(i for i, n in poisons.items() if n == "huge url")]["truncated"]
    assert stat(worker, "frontier/quarantined") == len(POISONS)
    assert worker.spider.name == "example"  # the dunder callback rewrote nothing


def test_no_stored_value_makes_a_script_fail(worker: RedisFrontier) -> None:
    """Mangled staged batches, scores, expiry and politeness counters: every lease call
    still runs to its end (a script that failed half-way wedged the crawl and kept counting
    expiries)."""
    client, keys = worker.client, worker.keys
    worker.admit(None, [Request("https://example.com/ok")])
    past = 1
    for lease, staged in {
        "batch:deep": b"[" * 5000,
        "batch:shape": b'{"batch":"x","entries":[[1,2,{"a":1}]]}',
        "batch:text": b"not json",
    }.items():
        client.hset(keys.staged, lease, staged)
        client.zadd(keys.leases, {lease: past})
    expired = inject(client, keys, b'{"url":"https://example.com/expired"}', score=0)
    client.zadd(keys.leases, {expired: past})
    client.lrem(keys.lane("0|"), 1, f"#{expired}")  # leased: out of its lane
    client.hset(keys.lanes, expired, "not a lane")
    client.hset(keys.expiries, expired, "many")
    client.hset(keys.host_busy, "example.com", "lots")
    client.hset(keys.host_delay, "example.com", "slow")

    leased = worker.lease(10)
    assert sorted(r.url for r in leased) == [
        "https://example.com/expired",
        "https://example.com/ok",
    ]
    reasons = {r["id"]: r["reason"] for r in quarantine.records(client, keys)}
    assert reasons == dict.fromkeys(
        ["batch:deep", "batch:shape", "batch:text"], "staged batch is not a batch record"
    )


def test_quarantine_keeps_the_newest_records_and_counts_the_dropped(redis_url: str) -> None:
    worker = make_worker(redis_url)
    worker.leases.quarantine_cap = 3
    try:
        ids = [inject(worker.client, worker.keys, b"{bad %d" % i) for i in range(5)]
        for _ in ids:  # one per lease call: quarantined in this order
            assert worker.lease(1) == []
        kept = [r["id"] for r in quarantine.records(worker.client, worker.keys)]
        assert kept == ids[2:]
        assert quarantine.sizes(worker.client, worker.keys) == (3, 2)
    finally:
        worker.close()


def test_requeue_and_drop(worker: RedisFrontier) -> None:
    client, keys = worker.client, worker.keys
    fixable = inject(client, keys, b'{"url":"https://example.com/later","callback":"parse_v2"}', 5)
    cut = inject(client, keys, b'{"url":"https://example.com/' + b"a" * 1_100_000 + b'"}')
    assert worker.lease(10) == []
    assert quarantine.sizes(client, keys) == (2, 0)

    assert quarantine.requeue(client, keys, ["all"]) == (1, 1)  # a cut payload stays
    assert client.zcard(keys.queue) == 1
    [lane] = client.zrange(keys.queue, 0, -1)
    assert lane == b"5|"  # its old level (priority -5)
    [requeued] = client.lrange(keys.lane("5|"), 0, -1)
    assert requeued.endswith(b'"parse_v2"}')
    assert [r["id"] for r in quarantine.records(client, keys)] == [cut]
    assert quarantine.drop(client, keys, [cut]) == 1
    assert quarantine.sizes(client, keys) == (0, 0)
    assert not requeued.startswith(f"#{fixable}".encode())  # queued as a new request


def test_frontier_command_lists_requeues_and_drops_the_quarantine(redis_url: str) -> None:
    worker, _ = frontier_of(redis_url)
    try:
        for payload in (b"{not json", b'{"url":"https://example.com/","_class":"os.system"}'):
            inject(worker.client, worker.keys, payload)
        assert worker.lease(10) == []
    finally:
        worker.close()
    settings = ("-s", f"REDIS_URL={redis_url}")
    status = scrapy("frontier", "site", *settings)
    assert "quarantined: 2 (see --quarantine)" in status.stdout, status.stderr
    listed = scrapy("frontier", "site", "--quarantine", "--json", *settings)
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    assert ["not JSON" in records[0]["reason"], "not allowed" in records[1]["reason"]] == [
        True,
        True,
    ]
    assert records[1]["payload"].startswith('{"url"')
    text: Any = scrapy("frontier", "site", "--quarantine", *settings).stdout
    assert "os.system" in text and "not allowed" in text
    dropped = scrapy("frontier", "site", "--drop-quarantined", records[0]["id"], *settings)
    assert dropped.stdout.strip() == "1 dropped"
    requeued = scrapy("frontier", "site", "--requeue-quarantined", "all", *settings)
    assert requeued.stdout.strip() == "1 requeued, 0 kept (payload cut or record not readable)"


# --- end to end: poisons injected while two workers crawl ------------------------------------

PAGES = 30


def site_routes() -> dict[str, Page]:
    """A root linking to PAGES pages, each linking on to the next two (and back home)."""
    routes = {"/": html(*(f"/p{i}" for i in range(PAGES)))}
    for i in range(PAGES):
        routes[f"/p{i}"] = html("/", f"/p{(i + 1) % PAGES}", f"/p{(i + 2) % PAGES}")
    routes["/later"] = html("/p0")
    return routes


def start_worker(start_url: str, redis_url: str, store_url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SCRAPY, "crawl", "site", "-a", f"start_url={start_url}",
         "-s", f"REDIS_URL={redis_url}", "-s", f"STORE_URL={store_url}",
         "-s", "FRONTIER_LEASE_BATCH=4"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(worker: subprocess.Popen[str]) -> None:
    _, stderr = worker.communicate(timeout=180)
    assert worker.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]


def test_poisons_injected_during_a_crawl_end_in_quarantine_and_the_crawl_finishes(
    redis_url: str, tmp_path: Path, pg_url: str
) -> None:
    """Two workers (then a third) share the frontier and, as workers should, one PostgreSQL
    record store (processes sharing a SQLite file can log lock errors under load)."""
    secret = tmp_path / "secret.html"
    keys = FrontierKeys.for_prefix("{site}")
    with TestServer(site_routes(), delay=0.05) as site, redis.Redis.from_url(redis_url) as client:
        secret.write_text(f'<a href="{site.url}/leak?secret=s3cret">x</a>')
        poisons = {
            "deep meta": POISONS["deep meta"],
            "bogus encoding": POISONS["bogus encoding"],
            "dunder callback": POISONS["dunder callback"],
            "class import": POISONS["class import"],
            "50 MB url": (b'{"url":"https://e.com/' + b"a" * 50_000_000 + b'"}', "more than"),
        }
        workers = [start_worker(f"{site.url}/", redis_url, pg_url) for _ in range(2)]
        deadline = time.monotonic() + 60
        while "/" not in site.paths() and time.monotonic() < deadline:
            time.sleep(0.1)
        ids = {
            inject(client, keys, payload, score=-10): name for name, (payload, _) in poisons.items()
        }
        file_request = json.dumps({"url": secret.as_uri(), "callback": "parse"}).encode()
        inject(client, keys, file_request, score=-10)
        for worker in workers:
            finish(worker)
        hits = Counter(path for path in site.paths() if path != "/robots.txt")

        records = {r["id"]: r for r in quarantine.records(client, keys)}
        failed = {url.decode(): json.loads(r) for url, r in client.hgetall(keys.failed).items()}
        assert client.zcard(keys.queue) == 0 and client.zcard(keys.leases) == 0

        # A third worker, started afterwards, with one more poison waiting: leases normally.
        late_poison = inject(client, keys, POISONS["not json"][0], score=-10)
        third = start_worker(f"{site.url}/later", redis_url, pg_url)
        finish(third)
        late_hits = Counter(path for path in site.paths() if path != "/robots.txt") - hits

    innocent = {"/": 1, **{f"/p{i}": 1 for i in range(PAGES)}}
    assert hits == innocent  # every innocent page exactly once, nothing else (no /leak)
    assert set(records) == set(ids), (ids, {i: r["reason"] for i, r in records.items()}, failed)
    for request_id, name in ids.items():
        assert poisons[name][1] in records[request_id]["reason"], (name, records[request_id])
    assert list(failed) == [secret.as_uri()]
    assert "scheme:file" in failed[secret.as_uri()]["reason"]
    assert late_hits == {"/later": 1}
    with redis.Redis.from_url(redis_url) as client:
        late_record = quarantine.records(client, keys)[-1]
    assert late_record["id"] == late_poison and "not JSON" in late_record["reason"]


def test_a_crawlspiders_links_pass_through_the_shared_frontier(redis_url: str) -> None:
    """CrawlSpider stores its links with its private ``_callback``/``_errback``: another
    worker leases them with both bound to its own spider, none quarantined."""
    (first, first_spider), (second, second_spider) = (
        frontier_of(redis_url, ShopCrawlSpider, "shop-crawl") for _ in range(2)
    )
    page = HtmlResponse(
        "https://example.com/",
        body=b'<a href="/a">a</a> <a href="/b">b</a>',
        encoding="utf-8",
        request=Request("https://example.com/"),
    )
    try:
        first.admit(None, list(first_spider._requests_to_follow(page)))
        leased = second.lease(10)
        assert sorted(r.url for r in leased) == ["https://example.com/a", "https://example.com/b"]
        assert {(r.callback, r.errback) for r in leased} == {
            (second_spider._callback, second_spider._errback)
        }
        assert quarantine.sizes(second.client, second.keys) == (0, 0)
    finally:
        first.close()
        second.close()


@contextmanager
def documented_acl_user(redis_url: str) -> Iterator[str]:
    """The user the ACL line of docs/security.md creates, applied as written: its URL;
    deleted after."""
    line = next(
        text.strip()
        for text in (ROOT / "docs" / "security.md").read_text().splitlines()
        if text.strip().startswith("ACL SETUSER crawl-site")
    )
    with redis.Redis.from_url(redis_url) as admin:
        admin.execute_command(*line.split())
    try:
        yield redis_url.replace("redis://", "redis://crawl-site:a-long-random-password@")
    finally:
        with redis.Redis.from_url(redis_url) as admin:
            admin.acl_deluser("crawl-site")


def test_the_documented_acl_lets_a_worker_crawl_and_confines_it(redis_url: str) -> None:
    """The ACL line of docs/security.md, applied as written: a worker of the crawl ``site``
    admits, leases, quarantines and answers through it; another crawl's keys and dangerous
    commands are refused."""
    with documented_acl_user(redis_url) as user_url:
        worker, _ = frontier_of(user_url)
        try:
            worker.admit(None, [Request("https://example.com/"), Request("https://example.com/b")])
            inject(worker.client, worker.keys, b"{not json")
            leased = worker.lease(10)
            worker.admit(leased[0], [])
            worker.fail(leased[1], "test")
            assert worker.flush() and worker.is_drained()
            assert quarantine.sizes(worker.client, worker.keys) == (1, 0)
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.client.get("{other}:queue")
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.client.flushall()
        finally:
            worker.close()
