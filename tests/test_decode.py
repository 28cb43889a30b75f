"""A stored request is untrusted input: decoding gives back a request or refuses it with a
reason (RequestNotLoadable), never runs code the worker did not ship, never lets another
exception out."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule, SitemapSpider
from scrapy.utils.test import get_crawler

from bloom_frontier.frontier import decode
from bloom_frontier.frontier.decode import (
    FORMAT_VERSION,
    RequestDecoder,
    RequestNotLoadable,
    request_from_json,
)
from bloom_frontier.frontier.serialize import RequestNotSerializable, request_to_json


class ShopSpider(Spider):
    name = "shop"

    def parse(self, response: Any) -> None:
        """The usual callback."""

    def parse_item(self, response: Any, category: str = "") -> None:
        """A callback with cb_kwargs."""

    def _parse_detail(self, response: Any) -> None:
        """A private callback of the user's own: allowed."""

    @classmethod
    def helper(cls) -> None:
        """Not an instance method: refused."""

    @property
    def total(self) -> int:
        return 0


class ShopCrawlSpider(CrawlSpider):
    name = "shop-crawl"
    rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)

    def parse_item(self, response: Any) -> None:
        """Rule callback."""


class ShopSitemapSpider(SitemapSpider):
    name = "shop-sitemap"
    sitemap_urls: ClassVar[list[str]] = ["https://example.com/sitemap.xml"]


def stored(**fields: Any) -> str:
    return json.dumps({"v": FORMAT_VERSION, "url": "https://example.com/", **fields})


def refusal(text: str | bytes, spider: Spider | None = None, **limits: Any) -> str:
    with pytest.raises(RequestNotLoadable) as caught:
        RequestDecoder(**limits).decode(text, spider)
    return caught.value.reason


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("__init__", "special method"),
        ("__class__", "special method"),
        ("__setattr__", "special method"),
        ("_set_crawler", "scrapy.Spider"),
        ("from_crawler", "scrapy.Spider"),
        ("update_settings", "scrapy.Spider"),
        ("close", "scrapy.Spider"),
        ("start", "scrapy.Spider"),
        ("log", "scrapy.Spider"),
        ("name", "not a method"),
        ("custom_settings", "scrapy.Spider"),
        ("helper", "not a method"),
        ("total", "not a method"),
        ("no_such", "has no method"),
        ("parse.__globals__", "not a method name"),
    ],
)
def test_callbacks_are_only_the_spiders_own_methods(name: str, why: str) -> None:
    spider = ShopSpider()
    assert why in refusal(stored(callback=name), spider)
    assert why in refusal(stored(errback=name), spider)


def test_private_helpers_of_scrapys_spiders_are_refused_their_callbacks_allowed() -> None:
    crawl_spider = ShopCrawlSpider()
    for name in ("_parse_response", "_requests_to_follow", "_compile_rules"):
        assert "internal method" in refusal(stored(callback=name), crawl_spider)
    loaded = request_from_json(stored(callback="_callback", errback="_errback"), crawl_spider)
    assert loaded.callback == crawl_spider._callback
    assert loaded.errback == crawl_spider._errback
    sitemap_spider = ShopSitemapSpider()
    loaded = request_from_json(stored(callback="_parse_sitemap"), sitemap_spider)
    assert loaded.callback == sitemap_spider._parse_sitemap


def test_crawlspider_requests_round_trip() -> None:
    """A CrawlSpider's link requests (callback ``_callback``, rule index in meta) come back
    as the same requests, bound to the loading worker's spider."""
    crawler = get_crawler(ShopCrawlSpider)
    spider = ShopCrawlSpider.from_crawler(crawler)
    page = HtmlResponse(
        "https://example.com/",
        body=b'<a href="/a">a</a> <a href="/b">b</a>',
        encoding="utf-8",
        request=Request("https://example.com/"),
    )
    links = list(spider._requests_to_follow(page))
    assert len(links) == 2
    other = ShopCrawlSpider.from_crawler(get_crawler(ShopCrawlSpider))
    for request in links:
        loaded = request_from_json(request_to_json(request, spider), other)
        assert loaded.url == request.url
        assert loaded.callback == other._callback
        assert loaded.errback == other._errback
        assert loaded.meta == request.meta


def test_user_private_methods_resolve_on_the_class_not_instance_attributes() -> None:
    spider = ShopSpider()
    spider.parse_item = print  # e.g. a spider argument of the same name
    loaded = request_from_json(stored(callback="parse_item", errback="_parse_detail"), spider)
    assert loaded.callback.__func__ is ShopSpider.parse_item
    assert loaded.errback.__func__ is ShopSpider._parse_detail


@pytest.mark.parametrize(
    "class_name",
    ["this.x", "os.system", "builtins.eval", "subprocess.Popen", "scrapy.Spider", 42],
)
def test_request_class_is_checked_by_name_before_any_import(
    class_name: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    imported: list[str] = []
    monkeypatch.setattr(decode, "load_object", imported.append)
    reason = refusal(stored(_class=class_name))
    assert "_class" in reason or "not allowed" in reason
    assert imported == []


def test_request_classes_may_be_widened_by_a_setting() -> None:
    name = "tests.test_decode.ShopRequest"
    assert "not allowed" in refusal(stored(_class=name))
    request = RequestDecoder(extra_classes=frozenset({name})).decode(stored(_class=name))
    assert type(request) is ShopRequest


class ShopRequest(Request):
    """A project's own request class, allowed by FRONTIER_REQUEST_CLASSES."""


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"url": 42}, "url must be str"),
        ({"priority": "high"}, "priority must be int"),
        ({"priority": True}, "priority must be int"),
        ({"priority": 10**30}, "out of range"),
        ({"dont_filter": "yes"}, "dont_filter must be bool"),
        ({"meta": [1, 2]}, "meta must be dict"),
        ({"cb_kwargs": {"$m": [[1, 2]]}}, "text keys"),
        ({"headers": {"A": "b"}}, "headers must be list"),
        ({"headers": [["A"]]}, "pairs"),
        ({"flags": [1]}, "a flag must be str"),
        ({"body": 5}, "body must be str or bytes"),
        ({"body": {"$b": "%%%"}}, "not valid base64"),
        ({"cookies": {"a": {"b": 1}}}, "cookie values"),
        ({"method": "GET /x HTTP/1.1\r\n"}, "HTTP method token"),
        ({"encoding": "bogus-enc"}, "not a known codec"),
        ({"encoding": "base64"}, "not a text encoding"),
        ({"dumps_kwargs": {}}, "unknown field 'dumps_kwargs'"),
        ({"formdata": {"a": "b"}}, "unknown field 'formdata'"),
        ({"v": 99}, "format version 99"),
        ({"v": "1"}, "format version 1"),
        ({"callback": 5}, "callback must be str"),
    ],
)
def test_wrong_fields_are_refused_with_a_reason(fields: dict[str, Any], why: str) -> None:
    assert why in refusal(stored(**fields), ShopSpider())


def test_callbacks_need_a_spider() -> None:
    assert "needs a spider" in refusal(stored(callback="parse"))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 5000 + "]" * 5000, "nested"),
        ('{"url": "https://e.com/", "meta": {"a": ' + "[" * 200 + "]" * 200 + "}}", "nested"),
        ('{"url": "https://e.com/", "meta": {"a": NaN}}', "NaN"),
        (b'{"url": "https://e.com/\xff"}', "UTF-8"),
        ("not json", "not JSON"),
        ('"a string"', "JSON str"),
        ('{"meta": {}}', "no url"),
    ],
)
def test_malformed_text_is_refused(text: str | bytes, why: str) -> None:
    assert why in refusal(text)


def test_size_is_capped_at_decode_before_parsing() -> None:
    huge = stored(url="https://example.com/" + "a" * 50_000_000)
    started = time.perf_counter()
    assert "more than FRONTIER_MAX_REQUEST_BYTES" in refusal(huge)
    assert time.perf_counter() - started < 2.0  # not parsed: a 50 MB url took 8 s and 4.5 GB
    reason = refusal(stored(url="https://example.com/" + "a" * 100), max_bytes=100)
    assert "more than FRONTIER_MAX_REQUEST_BYTES (100)" in reason


def test_size_and_depth_are_capped_at_enqueue() -> None:
    with pytest.raises(RequestNotSerializable, match="FRONTIER_MAX_REQUEST_BYTES"):
        request_to_json(Request("https://example.com/" + "a" * 200), max_bytes=100)
    deep: Any = []
    for _ in range(decode.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(RequestNotSerializable, match="nested"):
        request_to_json(Request("https://example.com/", meta={"deep": deep}))


def test_previous_unversioned_format_is_still_read() -> None:
    spider = ShopSpider()
    written = json.loads(request_to_json(Request("https://e.com/", callback=spider.parse), spider))
    assert written["v"] == FORMAT_VERSION
    del written["v"]  # as stored before the format carried a version
    assert request_from_json(json.dumps(written), spider).callback == spider.parse


# --- property: any input gives a request or the decoder's own error ------------------------

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=50)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=10), children, max_size=5)
        | st.builds(lambda v: {"$b": v}, children)
        | st.builds(lambda v: {"$t": v}, children)
        | st.builds(lambda v: {"$m": v}, children)
        | st.builds(lambda v: {"$d": v}, children)
    ),
    max_leaves=30,
)
FIELD_NAMES = st.sampled_from(
    [
        "url",
        "callback",
        "errback",
        "headers",
        "body",
        "cookies",
        "meta",
        "encoding",
        "flags",
        "cb_kwargs",
        "dont_filter",
        "method",
        "priority",
        "_class",
        "v",
        "dumps_kwargs",
    ]
)
#: Stored requests shaped like real ones: known fields (and a few others) of any value.
SHAPED = st.dictionaries(FIELD_NAMES | st.text(max_size=8), JSON_VALUES, max_size=8).map(json.dumps)
DEEP = st.integers(1, 20_000).flatmap(
    lambda n: st.sampled_from(["[" * n, "[" * n + "]" * n, '{"url":"x","meta":' + "[" * n])
)
HUGE = st.integers(1, 3_000_000).map(lambda n: stored(url="x" * n))


def only_request_or_own_error(text: str | bytes, spider: Spider | None) -> None:
    try:
        result = RequestDecoder(max_bytes=2_000_000).decode(text, spider)
    except RequestNotLoadable as exc:
        assert exc.reason
    else:
        assert isinstance(result, Request)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=SHAPED | JSON_VALUES.map(json.dumps) | DEEP | HUGE | st.binary(max_size=200))
def test_any_input_gives_a_request_or_the_decoders_error(text: str | bytes) -> None:
    only_request_or_own_error(text, ShopSpider())
    only_request_or_own_error(text, None)


@settings(max_examples=200, deadline=None)
@given(
    url=st.text(max_size=80),
    callback=st.sampled_from(["parse", "parse_item", "_callback", "__init__"]) | st.text(),
    encoding=st.sampled_from(["utf-8", "latin-1", "bogus", "base64", "rot13"]) | st.text(),
    method=st.text(max_size=10),
    meta=JSON_VALUES,
)
def test_near_valid_requests_give_a_request_or_the_decoders_error(
    url: str, callback: str, encoding: str, method: str, meta: Any
) -> None:
    text = stored(url=url, callback=callback, encoding=encoding, method=method, meta=meta)
    only_request_or_own_error(text, ShopCrawlSpider())


def test_jobdir_queues_refuse_what_the_frontier_refuses() -> None:
    """``JOBDIR`` disk queues read through the same checks (the spider is resolved later by
    Scrapy, so only what needs no spider: class, fields, callback names)."""
    for fields in ({"callback": "__init__"}, {"errback": "close"}, {"_class": "os.system"}):
        with pytest.raises(RequestNotLoadable):
            decode.request_dict_from_json(stored(**fields))
    assert decode.request_dict_from_json(stored(callback="parse_item"))["callback"] == "parse_item"


# --- poisoned meta and callbacks: refused with a reason, never a traceback later -----------


def site_spider() -> Spider:
    from bloom_frontier.spiders.site import SiteSpider

    return SiteSpider(start_url="https://example.com/")


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"callback": "is_short_link"}, "not a callback of spider 'site'"),
        ({"errback": "follows"}, "not a callback of spider 'site'"),
        ({"meta": {"redirect_chain": 1}}, "meta 'redirect_chain' must be a redirect chain"),
        ({"meta": {"redirect_chain": {"hops": 1}}}, "must be a redirect chain"),
        ({"meta": {"bindaddress": ["127.0.0.1"]}}, "meta 'bindaddress' must be a host or"),
        ({"meta": {"bindaddress": [["a"], 0]}}, "meta 'bindaddress' must be a host or"),
        ({"meta": {"redirect_times": "1"}}, "meta 'redirect_times' must be a count"),
        ({"meta": {"download_maxsize": -1}}, "meta 'download_maxsize' must be a byte count"),
        ({"meta": {"download_timeout": "soon"}}, "must be seconds"),
        ({"meta": {"proxy": ["http://p"]}}, "meta 'proxy' must be a proxy URL"),
        ({"meta": {"download_slot": 7}}, "meta 'download_slot' must be a slot name"),
        ({"meta": {"handle_httpstatus_list": ["404"]}}, "a list of statuses"),
        ({"meta": {"cookiejar": [1]}}, "meta 'cookiejar' must be a jar id"),
        ({"meta": {"dedupe_key": 5}}, "meta 'dedupe_key' must be a dedupe key"),
    ],
)
def test_poisoned_meta_and_helper_callbacks_are_refused(fields: dict[str, Any], why: str) -> None:
    assert why in refusal(stored(**{"callback": "parse", **fields}), site_spider())


def test_the_site_spiders_own_callback_still_loads() -> None:
    spider = site_spider()
    assert request_from_json(stored(callback="parse"), spider).callback == spider.parse


# --- fetch-changing meta: only as far as the crawl's settings allow ---------------------------

#: A stored request's meta asking for more than a crawl on the project's settings allows.
GREEDY_META: dict[str, Any] = {
    "dont_obey_robotstxt": True,
    "allow_offsite": True,
    "download_maxsize": 0,
    "download_warnsize": 0,
    "download_timeout": 100_000,
    "download_fail_on_dataloss": False,
    "proxy": "http://proxy.example:3128",
    "download_slot": "other.example",
    "bindaddress": ["10.0.0.1", 0],
    "max_retry_times": 1000,
}
#: ... and what is anyone's to ask for: the users' own keys, Scrapy's narrowing ones.
OWN_META: dict[str, Any] = {
    "category": {"id": 7, "path": ["a", "b"]},
    "dont_redirect": True,
    "handle_httpstatus_list": [404],
    "depth": 3,
    "download_maxsize": 1000,
    "download_timeout": 5,
}


def project_decoder(**overrides: Any) -> tuple[RequestDecoder, Any]:
    """The decoder of a crawl on the project's settings (``bloom_frontier.settings``:
    ``ROBOTSTXT_OBEY``, the add-on...) and ``overrides``, with the crawl's stats."""
    import bloom_frontier.settings as project

    settings = {name: getattr(project, name) for name in dir(project) if name.isupper()}
    crawler = get_crawler(ShopSpider, {**settings, **overrides})
    assert crawler.stats is not None
    crawler.stats.open_spider()
    return RequestDecoder.from_settings(crawler.settings, crawler.stats), crawler.stats


def test_fetch_meta_beyond_the_settings_is_dropped_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "bloom_frontier.frontier.storedmeta")
    decoder, stats = project_decoder()
    spider = ShopSpider()
    text = stored(
        callback="parse_item",
        meta={**GREEDY_META, "category": OWN_META["category"]},
        cb_kwargs={"category": "shoes"},
    )
    for _ in range(2):
        loaded = decoder.decode(text, spider)
        assert loaded.meta == {"category": OWN_META["category"]}
        assert loaded.cb_kwargs == {"category": "shoes"}
    counted = {
        name.rpartition("/")[2]: value
        for name, value in stats.get_stats().items()
        if name.startswith("frontier/stored_meta_dropped/")
    }
    assert counted == dict.fromkeys(GREEDY_META, 2)
    warnings = [r.getMessage() for r in caplog.records if "stored request asks" in r.message]
    assert len(warnings) == len(GREEDY_META)  # once per key, not once per request


def test_the_users_own_meta_and_narrowing_keys_pass_unchanged() -> None:
    decoder, stats = project_decoder()
    loaded = decoder.decode(stored(meta=OWN_META, cb_kwargs={"x": [1]}))
    assert loaded.meta == OWN_META
    assert loaded.cb_kwargs == {"x": [1]}
    assert not [name for name in stats.get_stats() if "stored_meta_dropped" in name]


def test_settings_that_allow_a_key_for_any_request_allow_it_stored() -> None:
    decoder, _ = project_decoder(
        ROBOTSTXT_OBEY=False,
        DOWNLOAD_MAXSIZE=0,
        DOWNLOAD_WARNSIZE=0,
        DOWNLOAD_TIMEOUT=100_000,
        DOWNLOAD_FAIL_ON_DATALOSS=False,
        SSRF_ALLOW_PROXY=True,
        DOWNLOAD_SLOTS={"other.example": {"delay": 1}},
        DOWNLOAD_BIND_ADDRESS="10.0.0.1",
        RETRY_TIMES=1000,
    )
    loaded = decoder.decode(stored(meta=GREEDY_META))
    assert loaded.meta == {
        key: value for key, value in GREEDY_META.items() if key != "allow_offsite"
    }


def test_a_shortener_resolution_keeps_what_the_shortener_middleware_gives_it() -> None:
    """A short link's resolution request is stored with ``dont_obey_robotstxt`` and
    ``allow_offsite``, by design; the same meta on a request to another host is dropped."""
    decoder, _ = project_decoder()
    short = "https://bit.ly/abc"
    meta = {"shortener": short, "dont_obey_robotstxt": True, "allow_offsite": True}
    assert decoder.decode(stored(url=short, meta=meta)).meta == meta
    other = "https://example.com/abc"
    loaded = decoder.decode(stored(url=other, meta={**meta, "shortener": other}))
    assert loaded.meta == {"shortener": other}
