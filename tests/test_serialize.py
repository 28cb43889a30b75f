"""Requests survive JSON storage (Redis frontier, JOBDIR queues) unchanged; what cannot be
stored is refused when it is stored, with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scrapy import FormRequest, Request, Spider
from scrapy.core.scheduler import Scheduler
from scrapy.http import JsonRequest
from scrapy.utils.test import get_crawler

import bloom_frontier.defaults as defaults
from bloom_frontier.frontier.decode import RequestNotLoadable, request_from_json
from bloom_frontier.frontier.diskqueue import JsonFifoDiskQueue, JsonLifoDiskQueue
from bloom_frontier.frontier.serialize import RequestNotSerializable, RequestShapes, request_to_json


class ExampleSpider(Spider):
    name = "example"

    def parse(self, response: Any) -> None:
        """Callback stored by name."""

    def parse_item(self, response: Any, category: str = "") -> None:
        """Callback with cb_kwargs."""

    def on_error(self, failure: Any) -> None:
        """Errback stored by name."""


class Other:
    def handle(self, response: Any) -> None:
        """A method, but not of the spider."""


def described(request: Request) -> dict[str, Any]:
    """Everything about a request a spider or Scrapy can observe."""
    return {
        "class": type(request),
        "url": request.url,
        "method": request.method,
        "headers": {key: request.headers.getlist(key) for key in request.headers},
        "body": request.body,
        "cookies": request.cookies,
        "meta": request.meta,
        "cb_kwargs": request.cb_kwargs,
        "encoding": request.encoding,
        "priority": request.priority,
        "dont_filter": request.dont_filter,
        "flags": request.flags,
        "callback": request.callback,
        "errback": request.errback,
        "dumps_kwargs": getattr(request, "dumps_kwargs", None),
    }


@pytest.fixture
def spider() -> ExampleSpider:
    return ExampleSpider()


def requests_the_project_makes(spider: ExampleSpider) -> list[Request]:
    return [
        Request("https://example.com/", callback=spider.parse),
        Request(
            "https://example.com/b?x=1",
            callback=spider.parse,
            meta={
                "dedupe_key": "r1:https://example.com/b?x=1",
                "dedupe_checked": "https://example.com/b?x=1",
                "depth": 3,
                "redirect_urls": ["http://example.com/a", "https://example.com/a"],
                "redirect_reasons": [301, "meta refresh"],
                "redirect_times": 2,
                "download_latency": 0.125,
                "hops": [{"from": "http://example.com/a", "status": 301}],
                "retry_times": 1,
                "proxy": None,
            },
            priority=-2,
            flags=["cached"],
        ),
        FormRequest(
            "https://example.com/login",
            formdata={"user": "ann", "pass": "s3cr\u00e9t"},
            callback=spider.parse_item,
            errback=spider.on_error,
            cb_kwargs={"category": "login"},
            cookies={"session": "abc", "lang": "fr"},
            priority=5,
        ),
        JsonRequest(
            "https://api.example.com/items",
            data={"page": 2, "tags": ["a", "b"]},
            dumps_kwargs={"indent": 2},
            callback=spider.parse_item,
            cb_kwargs={"category": "api"},
        ),
        Request(
            "https://example.com/binary",
            method="PUT",
            body=b"\x00\xff\xfe raw",
            headers={
                "X-Raw": b"\xe9t\xe9",
                "Accept-Language": ["fr", "en;q=0.5"],
                "Referer": "https://example.com/",
            },
            cookies=[{"name": "a", "value": "1", "domain": "example.com", "path": "/"}],
            encoding="latin-1",
            dont_filter=True,
        ),
        Request(
            "https://example.com/odd-meta",
            meta={
                "bytes": b"\x01\x02",
                "tuple": (1, "two", (3,)),
                "int_keys": {1: "one", 2: ["two"]},
                "looks_like_a_tag": {"$b": "not base64!"},
                "nested_tag": {"$d": {"$t": 1}},
                "empty": {},
            },
        ),
    ]


@pytest.mark.parametrize("index", range(6))
def test_round_trip_keeps_every_attribute(spider: ExampleSpider, index: int) -> None:
    request = requests_the_project_makes(spider)[index]
    text = request_to_json(request, spider)
    json.loads(text)  # plain JSON text
    loaded = request_from_json(text, spider)
    assert described(loaded) == described(request)


def test_round_trip_through_bytes_and_twice(spider: ExampleSpider) -> None:
    for request in requests_the_project_makes(spider):
        once = request_to_json(request, spider)
        again = request_to_json(request_from_json(once.encode(), spider), spider)
        assert again == once


def test_callbacks_resolve_on_the_loading_workers_spider(spider: ExampleSpider) -> None:
    text = request_to_json(Request("https://example.com/", callback=spider.parse), spider)
    other_worker_spider = ExampleSpider()
    loaded = request_from_json(text, other_worker_spider)
    assert loaded.callback == other_worker_spider.parse


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda s: Request("https://e.com/", callback=lambda r: None), "lambda"),
        (lambda s: Request("https://e.com/", callback=Other().handle), "Other.handle"),
        (lambda s: Request("https://e.com/", errback=lambda f: None), "lambda"),
        (lambda s: Request("https://e.com/", meta={"selector": object()}), "meta['selector']"),
        (lambda s: Request("https://e.com/", meta={"n": [1, float("nan")]}), "meta['n'][1]"),
        (lambda s: Request("https://e.com/", cb_kwargs={"x": {1, 2}}), "cb_kwargs['x']"),
    ],
)
def test_unserializable_request_is_refused_when_stored(
    spider: ExampleSpider, make: Any, where: str
) -> None:
    with pytest.raises(RequestNotSerializable) as caught:
        request_to_json(make(spider), spider)
    assert where in caught.value.reason
    assert isinstance(caught.value, ValueError)  # Scrapy's disk queues expect ValueError


def test_callback_without_spider_is_refused(spider: ExampleSpider) -> None:
    with pytest.raises(RequestNotSerializable, match="callback"):
        request_to_json(Request("https://e.com/", callback=spider.parse))
    text = request_to_json(Request("https://e.com/"))  # no callback: needs no spider
    assert request_from_json(text).callback is None


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"url": "https://e.com/", "_class": "builtins.dict"}',
        '{"url": "https://e.com/", "_class": "no.such.module.Request"}',
        '{"url": "https://e.com/", "callback": "no_such_method"}',
        '{"callback": "parse"}',
        '{"url": "https://e.com/", "body": {"$b": "%%%"}}',
    ],
)
def test_bad_stored_text_is_a_clear_error(spider: ExampleSpider, text: str) -> None:
    with pytest.raises(RequestNotLoadable):
        request_from_json(text, spider)


@pytest.mark.parametrize("queue_class", [JsonFifoDiskQueue, JsonLifoDiskQueue])
def test_disk_queue_stores_json_and_gives_requests_back(
    tmp_path: Path, spider: ExampleSpider, queue_class: type
) -> None:
    crawler = get_crawler(ExampleSpider, {"ADDONS": {"bloom_frontier.Addon": 0}})
    crawler.spider = spider
    path = tmp_path / "q" / "0"
    queue = queue_class.from_crawler(crawler, str(path))
    sent = requests_the_project_makes(spider)
    for request in sent:
        queue.push(request)
    queue.close()
    stored = b"".join(file.read_bytes() for file in path.parent.rglob("*") if file.is_file())
    assert b'"url":"https://example.com/login"' in stored
    assert b"\x80\x04" not in stored  # no pickle protocol header

    queue = queue_class.from_crawler(crawler, str(path))
    got = [queue.pop() for _ in sent]
    assert queue.pop() is None
    queue.close()
    if queue_class is JsonLifoDiskQueue:
        got.reverse()
    assert [described(r) for r in got] == [described(r) for r in sent]


def test_jobdir_scheduler_resumes_from_json_and_keeps_unserializable_in_memory(
    tmp_path: Path,
) -> None:
    settings = {
        **{name: getattr(defaults, name) for name in dir(defaults) if name.isupper()},
        "JOBDIR": str(tmp_path / "job"),
        "SCHEDULER_DISK_QUEUE": "bloom_frontier.frontier.diskqueue.JsonLifoDiskQueue",
        "SCHEDULER_START_DISK_QUEUE": "bloom_frontier.frontier.diskqueue.JsonFifoDiskQueue",
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",
        "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",
    }

    def open_scheduler() -> tuple[Scheduler, ExampleSpider]:
        crawler = get_crawler(ExampleSpider, settings)
        crawler.spider = spider = ExampleSpider.from_crawler(crawler)
        scheduler = Scheduler.from_crawler(crawler)
        scheduler.open(spider)
        return scheduler, spider

    scheduler, spider = open_scheduler()
    assert scheduler.enqueue_request(
        Request("https://example.com/kept", callback=spider.parse_item, cb_kwargs={"a": b"\x00"})
    )
    assert scheduler.enqueue_request(Request("https://e.com/", meta={"o": object()}))
    assert scheduler.stats.get_value("scheduler/unserializable") == 1
    scheduler.close("shutdown")

    scheduler, spider = open_scheduler()
    resumed = scheduler.next_request()
    assert resumed is not None
    assert resumed.url == "https://example.com/kept"
    assert resumed.callback == spider.parse_item
    assert resumed.cb_kwargs == {"a": b"\x00"}
    assert scheduler.next_request() is None  # the unserializable one lived in memory only
    scheduler.close("finished")


def test_request_shapes_give_what_to_dict_gives_without_asking_it_again(
    spider: ExampleSpider, monkeypatch: pytest.MonkeyPatch
) -> None:
    shapes = RequestShapes(spider)
    requests = [
        Request("https://e.com/a", callback=spider.parse, meta={"depth": 1}),
        Request("https://e.com/b", callback=spider.parse, priority=3, headers={"X": "1"}),
        Request(
            "https://e.com/c",
            callback=spider.parse_item,
            errback=spider.on_error,
            cb_kwargs={"category": "x"},
        ),
        FormRequest("https://e.com/f", formdata={"q": "1"}, callback=spider.parse),
        JsonRequest("https://e.com/j", data={"q": 1}, callback=spider.parse),
        Request("https://e.com/n"),
    ]
    expected = [request.to_dict(spider=spider) for request in requests]
    assert [shapes.to_dict(request) for request in requests] == expected
    # Now every shape is known: to_dict (and its search of the spider) is not called.
    monkeypatch.setattr(Request, "to_dict", lambda *args, **kwargs: pytest.fail("called"))
    assert [shapes.to_dict(request) for request in requests] == expected
    again = Request("https://e.com/a2", callback=spider.parse, flags=["f"], method="HEAD")
    written = json.loads(request_to_json(again, spider, shapes=shapes))
    assert (written["url"], written["callback"], written["flags"]) == (again.url, "parse", ["f"])


def test_request_shapes_refuse_what_to_dict_refuses(spider: ExampleSpider) -> None:
    shapes = RequestShapes(spider)
    shapes.to_dict(Request("https://e.com/", callback=spider.parse))
    for _ in range(2):  # a refusal is not remembered as a shape
        with pytest.raises(RequestNotSerializable, match="callback"):
            request_to_json(
                Request("https://e.com/", callback=Other().handle), spider, shapes=shapes
            )
        with pytest.raises(RequestNotSerializable, match="callback"):
            request_to_json(
                Request("https://e.com/", callback=lambda r: None), spider, shapes=shapes
            )


def test_stored_meta_replaces_the_requests_own_without_a_copy(spider: ExampleSpider) -> None:
    request = Request("https://e.com/", callback=spider.parse, meta={"lease": "x", "a": 1})
    text = request_to_json(request, spider, meta={"a": 1, "dedupe_key": "k"})
    assert request_from_json(text, spider).meta == {"a": 1, "dedupe_key": "k"}
    assert request.meta == {"lease": "x", "a": 1}
