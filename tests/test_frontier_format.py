"""The shared frontier's storage: compact records (format 2) in list-backed lanes per
priority level and host, by reference to the crawl's table of request shapes.

What a user notices: the queue's memory per request (the target of issue 12: <= 160 bytes
for a 76-character URL, every structure of the queue counted), which priorities and orders
survive, that any worker decodes any other's records, that older records still decode and
malformed ones go to quarantine without stalling anyone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.http import FormRequest, JsonRequest

from bloom_frontier.commands.seed import BATCH, Command, batches
from bloom_frontier.frontier.decode import DEFAULT_DECODER, RequestNotLoadable, record_url
from bloom_frontier.frontier.redis import RedisFrontier, quarantine
from bloom_frontier.frontier.redis.layout import lane_rank
from bloom_frontier.frontier.redis.state import queued_records
from bloom_frontier.frontier.serialize import compact_record
from tests.test_frontier_redis import ExampleSpider, make_worker

#: Issue 12's target, bytes per queued request of a 76-character URL.
TARGET_BYTES = 160


@pytest.fixture
def worker(redis_url: str) -> Iterator[RedisFrontier]:
    frontier = make_worker(redis_url)
    yield frontier
    frontier.close()


def leased_urls(worker: RedisFrontier, count: int) -> list[str]:
    return [request.url for request in worker.lease(count)]


def test_queued_requests_take_at_most_160_bytes_each(worker: RedisFrontier) -> None:
    """``scrapy seed``'s path (its batches, its requests) for 50,000 URLs of 76 characters:
    ``MEMORY USAGE`` of every key the queue holds, the seen filter aside, per request."""
    urls = [
        f"https://www.example-shop.com/catalog/electronic/section-{i % 97:02d}/item-{i:08d}.htm"
        for i in range(50_000)
    ]
    assert {len(url) for url in urls} == {76}
    for batch in batches(urls, BATCH):
        worker.admit(None, list(Command.requests(batch, worker.stats, allowed_domains=[])))
    assert worker.counts()["queued"] == len(urls)
    client = worker.client
    held = [
        key
        for key in client.scan_iter(match=f"{worker.keys.prefix}:*", count=1000)
        if not key.decode().startswith(worker.keys.seen)
    ]
    assert worker.keys.lane("0|www.example-shop.com").encode() in held
    total = sum(client.memory_usage(key, samples=0) for key in held)
    assert total / len(urls) <= TARGET_BYTES, {k: client.memory_usage(k, samples=0) for k in held}
    # And they come back as they went in, first in, first out.
    assert leased_urls(worker, 3) == urls[:3]


def test_a_higher_priority_leaves_first_and_keeps_its_exact_value(worker: RedisFrontier) -> None:
    """Levels are -priority, clamped to +-1000; FIFO within a level."""
    priorities = {"low": -5, "a": 0, "high": 3, "b": 0, "top": 2500, "deep": -2000, "c": 0}
    worker.admit(
        None,
        [Request(f"https://example.com/{name}", priority=p) for name, p in priorities.items()],
    )
    leased = worker.lease(10)
    assert [r.url.rsplit("/", 1)[1] for r in leased] == [
        "top",
        "high",
        "a",
        "b",
        "c",
        "low",
        "deep",
    ]
    assert {r.url.rsplit("/", 1)[1]: r.priority for r in leased} == priorities


def test_priorities_beyond_the_bound_share_the_outermost_level(worker: RedisFrontier) -> None:
    worker.admit(
        None, [Request("https://example.com/1", priority=-1001), Request("https://example.com/2")]
    )
    worker.admit(None, [Request("https://example.com/3", priority=-5000)])
    lanes = [lane.decode() for lane in worker.client.zrange(worker.keys.queue, 0, -1)]
    assert lanes == ["0|example.com", "1000|example.com"]
    assert leased_urls(worker, 5) == [f"https://example.com/{i}" for i in (2, 1, 3)]


def test_each_hosts_requests_are_first_in_first_out_and_hosts_take_turns(
    worker: RedisFrontier,
) -> None:
    worker.admit(None, [Request(f"https://a.example/{i}") for i in range(3)])
    worker.admit(None, [Request(f"https://b.example/{i}") for i in range(2)])
    one_at_a_time = [leased_urls(worker, 1) for _ in range(6)]
    assert one_at_a_time == [
        ["https://a.example/0"],
        ["https://b.example/0"],
        ["https://a.example/1"],
        ["https://b.example/1"],
        ["https://a.example/2"],
        [],
    ]


def test_a_request_whose_lease_expired_goes_back_to_the_front_of_its_lane(
    redis_url: str,
) -> None:
    worker = make_worker(redis_url, lease_ttl=0.05)
    try:
        worker.admit(None, [Request(f"https://example.com/{i}") for i in range(3)])
        [first] = worker.lease(1)
        time.sleep(0.1)
        [again] = worker.lease(1)
        assert again.url == first.url == "https://example.com/0"
        assert again.meta["frontier_lease"] == first.meta["frontier_lease"]  # same id
        assert worker.client.hget(worker.keys.expiries, again.meta["frontier_lease"]) == b"1"
        assert leased_urls(worker, 5) == ["https://example.com/1", "https://example.com/2"]
    finally:
        worker.close()


def test_any_worker_decodes_any_workers_records_through_the_shared_shapes(
    redis_url: str,
) -> None:
    first, second = make_worker(redis_url), make_worker(redis_url)
    try:
        spider = first.spider
        assert spider is not None
        made = [
            Request("https://example.com/a", callback=spider.parse_api, cb_kwargs={"page": 2}),
            Request("https://example.com/b", callback=spider.parse_api, cb_kwargs={"page": 3}),
            Request("https://example.com/c", flags=["seed"], meta={"depth": 4}),
        ]
        first.admit(None, made)
        shapes = first.client.hgetall(first.keys.shapes)
        assert len(shapes) == 2  # one per shape, not per request
        [leased] = [second.lease(3)]
        assert [r.callback.__name__ if r.callback else None for r in leased] == [
            "parse_api",
            "parse_api",
            None,
        ]
        assert [r.cb_kwargs for r in leased] == [{"page": 2}, {"page": 3}, {}]
        assert leased[2].flags == ["seed"] and leased[2].meta["depth"] == 4
        # The dedupe key and politeness host come back, though neither is stored per request.
        assert leased[0].meta["dedupe_key"].endswith("https://example.com/a")
        assert leased[0].meta["frontier_host"] == "example.com"
        second.admit(None, [Request("https://example.com/d", callback=spider.parse_api)])
        assert first.client.hlen(first.keys.shapes) == 2  # the shape was known already
    finally:
        first.close()
        second.close()


ROUND_TRIPS = {
    "plain": lambda s: Request("https://example.com/plain"),
    "everything": lambda s: Request(
        "https://example.com/x?q=1",
        callback=s.parse_api,
        errback=s.parse,
        method="PUT",
        headers={"X-Token": "t"},
        body=b"\x00\xffbody",
        cookies={"session": "1"},
        meta={"raw": b"\x01", "pair": (1, 2), "keys": {1: "one"}, "dedupe_key": "k"},
        encoding="latin-1",
        priority=-7,
        dont_filter=True,
        flags=["f"],
        cb_kwargs={"page": 9},
    ),
    "form": lambda s: FormRequest("https://example.com/f", formdata={"a": "b"}),
    "json": lambda s: JsonRequest("https://example.com/j", data={"x": [1, 2]}),
    "url in meta": lambda s: Request(
        "https://example.com/m", meta={"dedupe_key": "r2|https://example.com/m", "same": None}
    ),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_compact_records_round_trip(name: str) -> None:
    spider = ExampleSpider()
    request = ROUND_TRIPS[name](spider)
    request.meta["frontier_host"] = "example.com"
    shape, rest = compact_record(request, spider, host="example.com", host_meta="frontier_host")
    assert rest.split("\t")[0] == request.url  # the URL stored once, first
    assert request.url not in shape
    decoded = DEFAULT_DECODER.decode(f"2\t1\t{rest}", spider, shape=shape, host="example.com")
    assert decoded.to_dict(spider=spider) == request.to_dict(spider=spider)
    assert type(decoded) is type(request)


def test_a_plain_link_stores_only_its_url() -> None:
    """Defaults are left out, and the meta a frontier adds is named by the shape."""
    request = Request(
        "https://example.com/page",
        meta={
            "dedupe_key": "r2|https://example.com/page",
            "dedupe_checked": "https://example.com/page",
            "frontier_host": "example.com",
        },
    )
    shape, rest = compact_record(request, host="example.com", host_meta="frontier_host")
    assert rest == "https://example.com/page"
    assert json.loads(shape) == {
        "host_meta": "frontier_host",
        "url_meta": {"dedupe_checked": "", "dedupe_key": "r2|"},
    }


MALFORMED = {
    "unknown shape": (b"2\t999\thttps://example.com/1", "not in the crawl's table"),
    "shape id not a number": (b"2\tx\thttps://example.com/2", "not a number"),
    "no url": (b"2\t1", "tab-separated"),
    "fields not json": (b"2\t1\thttps://example.com/3\t{bad", "not JSON"),
    "shape field beside the url": (
        b'2\t1\thttps://example.com/4\t{"callback":"parse"}',
        "may not stand beside the URL",
    ),
    "unknown field": (b'2\t1\thttps://example.com/5\t{"evil":1}', "unknown field"),
    "evil shape": (b"2\t77\thttps://example.com/6", "unknown shape field"),
    "dunder shape": (b"2\t78\thttps://example.com/7", "special method"),
    "not a record": (b"garbage", "not JSON"),
}


def test_malformed_compact_records_are_quarantined_and_the_rest_leased(
    worker: RedisFrontier,
) -> None:
    client, keys = worker.client, worker.keys
    worker.admit(None, [Request("https://example.com/good")])  # shape 1 exists now
    client.hset(keys.shapes, "77", '{"evil":"x"}')
    client.hset(keys.shapes, "78", '{"callback":"__init__"}')
    lane = "0|example.com"
    [good] = worker.lease(1)
    # As a writer to the crawl's keys could, with a reference to the request leased now.
    for payload in [
        *(payload for payload, _ in MALFORMED.values()),
        f"#{good.meta['frontier_lease']}",
    ]:
        client.rpush(keys.lane(lane), payload)
        client.incr(keys.queued)
    client.zadd(keys.queue, {lane: lane_rank(0, 0)})
    leased: list[Request] = []
    while worker.counts()["queued"]:  # a host's concurrency limit bounds each lease
        leased += worker.lease(20)
        worker.flush()
    assert leased == []  # and the request leased already is not leased twice
    records = quarantine.records(client, keys)
    reasons = {record["payload"].encode(): record["reason"] for record in records}
    assert len(reasons) == len(MALFORMED)
    for name, (payload, reason) in MALFORMED.items():
        assert reason in reasons[payload], (name, reasons)
    assert {record["host"] for record in records} == {"example.com"}
    assert worker.counts() == {"queued": 0, "leased": 1, "failed": 0, "seen": 1}


def test_older_records_still_decode(worker: RedisFrontier) -> None:
    """Format 1 and unversioned JSON in a lane (an older worker's requeued quarantine), and
    an older worker's staged batch ([score, host, JSON]) recovered after its lease expired."""
    client, keys = worker.client, worker.keys
    lane = "0|example.com"
    old = [
        {
            "v": 1,
            "url": "https://example.com/v1",
            "callback": "parse_api",
            "cb_kwargs": {"page": 1},
        },
        {"url": "https://example.com/v0", "meta": {"depth": 2}},
    ]
    for record in old:
        client.rpush(keys.lane(lane), json.dumps(record))
        client.incr(keys.queued)
    client.zadd(keys.queue, {lane: lane_rank(0, 0)})
    staged = {
        "batch": "b",
        "entries": [[-2, "example.com", '{"v":1,"url":"https://example.com/s"}']],
    }
    client.hset(keys.staged, "batch:b", json.dumps(staged))
    client.zadd(keys.leases, {"batch:b": 1})
    leased = worker.lease(10)
    assert [r.url for r in leased] == [
        "https://example.com/s",  # priority 2: first
        "https://example.com/v1",
        "https://example.com/v0",
    ]
    assert leased[1].callback == worker.spider.parse_api and leased[1].cb_kwargs == {"page": 1}
    assert leased[2].meta["depth"] == 2


def test_a_lane_key_someone_overwrote_is_moved_aside(worker: RedisFrontier) -> None:
    client, keys = worker.client, worker.keys
    client.set(keys.lane("0|example.com"), "not a list")
    worker.admit(None, [Request("https://example.com/a")])
    assert leased_urls(worker, 1) == ["https://example.com/a"]
    moved = [key.decode() for key in client.scan_iter(match="*:foreign:*")]
    assert len(moved) == 1 and client.get(moved[0]) == b"not a list"


def test_record_url_reads_both_formats_and_refuses_nothing_silently() -> None:
    assert record_url(b"2\t3\thttps://e.com/a\t{}") == "https://e.com/a"
    assert record_url('{"url": "https://e.com/b"}') == "https://e.com/b"
    assert record_url("2\t3") is None
    assert record_url("#0001") is None
    with pytest.raises(RequestNotLoadable, match="no lane was given"):
        DEFAULT_DECODER.decode("2\t1\thttps://e.com/", shape='{"host_meta":"h"}')


def test_rebuild_and_status_read_the_lanes(worker: RedisFrontier) -> None:
    worker.admit(None, [Request(f"https://example.com/{i}") for i in range(3)])
    queued: list[Any] = list(queued_records(worker.client, worker.keys))
    assert [record_url(record) for _, record in queued] == [
        f"https://example.com/{i}" for i in range(3)
    ]


def test_a_queue_of_the_older_layout_is_moved_to_lanes_when_a_worker_starts(
    redis_url: str,
) -> None:
    """As the older release stored a crawl: ids ranked by -priority in ``queue``, records
    (format 1) in ``requests``, score and host in ``scores`` and ``hosts``; one request
    leased by a worker that died. A new worker leases them all, in the old order."""
    first = make_worker(redis_url)
    keys = first.keys
    first.close()
    client = redis.Redis.from_url(redis_url)
    old = [  # (id, -priority, host, url)
        ("00000000000001", 0, "a.example", "https://a.example/1"),
        ("00000000000002", -3, "b.example", "https://b.example/first"),
        ("00000000000003", 0, "a.example", "https://a.example/2"),
        ("00000000000004", 0, "", "https://c.example/no-host"),
    ]
    for request_id, score, host, url in old:
        client.zadd(keys.queue, {request_id: score})
        client.hset(keys.requests, request_id, json.dumps({"v": 1, "url": url}))
        client.hset(f"{keys.prefix}:scores", request_id, score)
        if host:
            client.hset(f"{keys.prefix}:hosts", request_id, host)
    dead = "00000000000005"  # leased by a worker that died: its lease expired
    client.hset(keys.requests, dead, json.dumps({"v": 1, "url": "https://a.example/leased"}))
    client.hset(f"{keys.prefix}:scores", dead, 0)
    client.hset(f"{keys.prefix}:hosts", dead, "a.example")
    client.zadd(keys.leases, {dead: 1})
    client.hset(keys.owners, dead, "dead-worker")
    client.hset(keys.in_flight, dead, "a.example")
    client.hset(keys.host_busy, "a.example", 1)

    worker = make_worker(redis_url)
    try:
        assert not client.exists(f"{keys.prefix}:scores", f"{keys.prefix}:hosts")
        assert worker.counts()["queued"] == 4
        leased = [request.url for request in worker.lease(10)]
        assert leased == [
            "https://b.example/first",
            "https://a.example/leased",  # requeued to the front of its lane
            "https://a.example/1",
            "https://a.example/2",
            "https://c.example/no-host",
        ]
    finally:
        worker.close()
        client.close()
