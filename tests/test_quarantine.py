"""No stored message can stall the shared frontier: what a worker cannot decode goes to
quarantine with its reason, the requests leased with it go on, no Lua script fails on a
stored payload, and the quarantine can be listed, requeued and dropped."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.utils.test import get_crawler

import crawler.settings as project_settings
from crawler.frontier.redis import RedisFrontier, quarantine
from crawler.frontier.redis.layout import FrontierKeys
from tests.redirect_server import ROOT, SCRAPY
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
    """Queue ``payload`` as a producer with write access to the crawl's keys could."""
    request_id = f"{client.incr(keys.seq):014x}"
    client.zadd(keys.queue, {request_id: score})
    client.hset(keys.requests, request_id, payload)
    client.hset(keys.scores, request_id, score)
    return request_id


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
    """Mangled staged batches, scores and expiry counters: every lease call still runs to
    its end (a script that fails half-way wedged the crawl and kept counting expiries)."""
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
    client.zrem(keys.queue, expired)
    client.hset(keys.scores, expired, "not a number")
    client.hset(keys.expiries, expired, "many")

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
    [(requeued_id, score)] = client.zrange(keys.queue, 0, -1, withscores=True)
    assert client.hget(keys.requests, requeued_id).endswith(b'"parse_v2"}')
    assert score == 5
    assert [r["id"] for r in quarantine.records(client, keys)] == [cut]
    assert quarantine.drop(client, keys, [cut]) == 1
    assert quarantine.sizes(client, keys) == (0, 0)
    assert fixable != requeued_id  # queued as a new request


def scrapy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCRAPY, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_frontier_command_lists_requeues_and_drops_the_quarantine(redis_url: str) -> None:
    settings = {name: getattr(project_settings, name) for name in FRONTIER_SETTINGS}
    settings.update(REDIS_URL=redis_url, FRONTIER_LEASE_TTL=60.0)
    crawler = get_crawler(ExampleSpider, settings)
    assert crawler.stats is not None
    # The project's spider "site", whose frontier `scrapy frontier site` reads.
    worker = RedisFrontier.from_settings(crawler.settings, "site", crawler.stats)
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
