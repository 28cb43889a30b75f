"""The SSRF guard: private, loopback, link-local and metadata addresses are never connected to.

Crawls run with :class:`tests.redirect_server.SpyDownloadHandler` in place of Scrapy's HTTP
handler: it logs every host the crawler tried to reach and refuses, before any socket exists,
anything that is not loopback. An empty log of private hosts is the proof that nothing was
attempted; the guard-off crawl shows the spy would have seen them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from scrapy import Request, Spider
from scrapy.utils.python import without_none_values
from scrapy.utils.test import get_crawler

import bloom_frontier.settings as crawler_settings
from bloom_frontier.middlewares.ssrf import (
    AddressBlocked,
    SSRFGuardMiddleware,
    SSRFStartHostsMiddleware,
)
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.services import services_of
from bloom_frontier.ssrf import ProxyWithGuard, SSRFPolicy, address_refusal
from tests.aio import run_on_own_loop
from tests.redirect_server import PRIVATE_REDIRECTS, Crawl, run_crawl, spy_hosts

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

LOOPBACK = {"127.0.0.1", "localhost"}
#: A guarded crawler's settings: the add-on's (the guard on, the crawl services it gets its
#: policy from, the defaults table).
GUARDED = {"ADDONS": crawler_settings.ADDONS}


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("168.63.129.16", "metadata"),
        ("100.100.100.200", "metadata"),
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "cgnat"),
        ("fd00::1", "unique-local"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("192.0.2.1", "private"),  # documentation range: never a real server
        ("::ffff:a9fe:a9fe", "metadata"),  # IPv4-mapped 169.254.169.254
        ("::ffff:10.0.0.1", "private"),
        ("2002:a00:1::1", "private"),  # 6to4 around 10.0.0.1
        ("64:ff9b::a9fe:a9fe", "metadata"),  # NAT64 around 169.254.169.254
        ("240.0.0.1", "reserved"),
        ("93.184.215.14", None),
        ("2606:4700::1111", None),
        ("8.8.8.8", None),
    ],
)
def test_address_classes(address: str, reason: str | None) -> None:
    assert address_refusal(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://2852039166/", "metadata"),  # one decimal number
        ("http://0xA9FEA9FE/", "metadata"),  # one hex number
        ("http://0xA9.0xFE.0xA9.0xFE/", "metadata"),
        ("http://0251.0376.0251.0376/", "metadata"),  # octal
        ("http://169.254.43518/", "metadata"),  # a.b.c16
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://[::ffff:a9fe:a9fe]/", "metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("http://METADATA.GOOGLE.INTERNAL./", "metadata"),
        ("http://10.0.0.1:8080/admin", "private"),
        ("http://0x7f.1/", "loopback"),
        ("http://017700000001/", "loopback"),
        ("http://[fd00::1]/internal", "unique-local"),
        ("https://example.com/", None),  # names are judged by what they resolve to
        ("http://93.184.215.14/", None),
    ],
)
def test_every_spelling_of_a_private_host_is_refused(url: str, reason: str | None) -> None:
    assert SSRFPolicy().refusal(url) == reason


def test_allowed_hosts_are_exempt_in_any_spelling() -> None:
    policy = SSRFPolicy(["10.0.0.1", "Intranet.Example."])
    assert policy.refusal("http://10.0.0.1/") is None
    assert policy.refusal("http://167772161/") is None  # 10.0.0.1 as one number
    assert policy.refusal("http://10.0.0.2/") == "private"
    assert policy.answer_refusal("intranet.example", "10.1.2.3") is None
    assert policy.answer_refusal("other.example", "10.1.2.3") == "private"
    assert policy.answer_refusal("other.example", "93.184.215.14") is None


def test_middleware_refuses_before_download_and_records_the_block(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    crawler = get_crawler(settings_dict={"STORE_URL": store_url, **GUARDED})
    crawler.stats.open_spider()  # type: ignore[union-attr]
    middleware = SSRFGuardMiddleware.from_crawler(crawler)
    request = Request("http://0xA9.0xFE.0xA9.0xFE/latest/")
    with pytest.raises(AddressBlocked) as refused:
        middleware.process_request(request)
    assert refused.value.reason == "metadata"
    assert middleware.process_request(Request("https://example.com/")) is None
    services_of(crawler).recorder.store.close()
    chains = StoreReader.from_url(store_url).chains()
    assert [(c.start_url, c.outcome, c.reason, c.hops) for c in chains] == [
        (request.url, "blocked", "metadata", ())
    ]
    assert crawler.stats.get_value("ssrf/blocked/metadata") == 1  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    return run_crawl(tmp_path_factory.mktemp("ssrf"))


def test_no_connection_to_a_private_address_is_ever_attempted(crawl: Crawl) -> None:
    hosts = spy_hosts(crawl.spy_log)
    assert hosts, "the spy saw nothing: it is not installed"
    assert set(hosts) <= LOOPBACK


@pytest.mark.parametrize("start", sorted(set(PRIVATE_REDIRECTS) - {"/out/two/next"}))
def test_private_redirects_are_recorded_as_blocked(crawl: Crawl, start: str) -> None:
    chain = crawl.chains[start]
    assert chain.outcome == "blocked"
    assert chain.reason in {"metadata", "private", "unique-local"}
    assert chain.final_url == chain.hops[-1].target_url
    assert crawl.hits[start] == 1


def test_two_hop_chain_to_metadata_is_blocked_at_the_second_hop(crawl: Crawl) -> None:
    chain = crawl.chains["/out/two"]
    assert [crawl.path(hop.target_url) for hop in chain.hops] == [
        "/out/two/next",
        "http://169.254.169.254/latest/meta-data/iam/",
    ]
    assert chain.reason == "metadata"


def test_name_resolving_to_loopback_is_refused_by_the_resolver(crawl: Crawl) -> None:
    # The redirect to http://localhost:<port>/secret passed the address check (a name), got
    # as far as the download handler, and was refused at resolution: the server that answers
    # on that port never saw the request.
    assert "localhost" in spy_hosts(crawl.spy_log)
    assert crawl.hits["/secret"] == 0
    chain = crawl.chains["/out/dns"]
    assert (chain.outcome, chain.reason) == ("blocked", "dns:loopback")


def test_allowed_host_setting_lets_a_private_name_through(tmp_path: Path) -> None:
    crawl = run_crawl(tmp_path, "-s", "SSRF_ALLOWED_HOSTS=localhost")
    assert crawl.hits["/secret"] == 1
    assert crawl.chains["/out/dns"].outcome == "fetched"
    assert crawl.chains["/out/metadata"].outcome == "blocked"
    assert set(spy_hosts(crawl.spy_log)) <= LOOPBACK


def test_without_the_guard_the_spy_sees_the_attempts(tmp_path: Path) -> None:
    """The detector works: with the guard off, the crawler does try (and the spy refuses)."""
    crawl = run_crawl(tmp_path, "-s", "SSRF_GUARD_ENABLED=False", clean_log=False)
    attempted = set(spy_hosts(crawl.spy_log)) - LOOPBACK
    assert {"169.254.169.254", "10.0.0.1"} <= attempted
    assert crawl.hits["/secret"] == 1


class IntranetSpider(Spider):
    name = "intranet"
    allowed_domains: ClassVar[list[str]] = ["10.0.0.7"]

    async def start(self) -> AsyncIterator[Request]:
        yield Request("http://192.168.1.20/")


class OtherSpider(Spider):
    name = "other"


def started_crawler(spidercls: type[Spider]) -> Any:
    crawler = get_crawler(spidercls, GUARDED)
    crawler.spider = spidercls.from_crawler(crawler)
    return crawler


async def drain(start: AsyncIterator[Any]) -> list[Any]:
    return [output async for output in start]


def test_exemptions_are_per_crawler_allowed_domains_and_start_hosts() -> None:
    """``allowed_domains`` and the hosts ``start()`` yields are exempt for their crawler, and
    for no other crawler of the process."""
    intranet, other = started_crawler(IntranetSpider), started_crawler(OtherSpider)
    intranet_policy, other_policy = (
        services_of(intranet).ssrf_policy,
        services_of(other).ssrf_policy,
    )
    assert intranet_policy.refusal("http://10.0.0.7/") is None
    assert intranet_policy.refusal("http://192.168.1.20/") == "private"  # not yet started
    middleware = SSRFStartHostsMiddleware.from_crawler(intranet)
    start = intranet.spider.start()
    yielded = run_on_own_loop(drain(middleware.process_start(start)))
    assert [request.url for request in yielded] == ["http://192.168.1.20/"]
    assert intranet_policy.refusal("http://192.168.1.20/") is None
    assert intranet_policy.refusal("http://10.0.0.8/") == "private"
    assert other_policy.refusal("http://10.0.0.7/") == "private"
    assert other_policy.refusal("http://192.168.1.20/") == "private"


# --- schemes, download handlers, proxies ----------------------------------------------------


def project_settings(**overrides: object) -> BaseSettings:
    """The settings a crawl of this project sees: its add-on line, with the add-on's."""
    return get_crawler(OtherSpider, {"ADDONS": crawler_settings.ADDONS, **overrides}).settings


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "scheme:file"),
        ("file://intranet.example/secret.html", "scheme:file"),  # exempt host, wrong scheme
        ("data:text/html,<a href=x>", "scheme:data"),
        ("ftp://example.com/pub/", "scheme:ftp"),
        ("s3://bucket/key", "scheme:s3"),
        ("gopher://example.com/", "scheme:gopher"),
        ("javascript:alert(1)", "scheme:javascript"),
        ("http://[::1/", "invalid-host"),  # the canonicalizer rejects it: not "no refusal"
        ("http://127.0.0.1/" + "a" * 9000, "too-long"),  # the canonicalizer reads no host
        ("http://[::1]:80/" + "a" * 9000, "too-long"),
        ("HTTPS://intranet.example:8443/", None),
    ],
)
def test_only_http_and_https_reach_the_downloader(url: str, reason: str | None) -> None:
    assert SSRFPolicy(["intranet.example"]).refusal(url) == reason


def test_allowed_schemes_setting_widens_the_list() -> None:
    policy = SSRFPolicy.from_settings(project_settings(SSRF_ALLOWED_SCHEMES=["http", "ftp"]))
    assert policy.refusal("ftp://example.com/pub/") is None
    assert policy.refusal("https://example.com/") == "scheme:https"


def test_a_stored_file_request_is_refused_and_recorded(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    crawler = get_crawler(settings_dict={"STORE_URL": store_url, **GUARDED})
    crawler.stats.open_spider()  # type: ignore[union-attr]
    middleware = SSRFGuardMiddleware.from_crawler(crawler)
    with pytest.raises(AddressBlocked) as refused:
        middleware.process_request(Request("file:///etc/passwd"))
    assert refused.value.reason == "scheme:file"
    services_of(crawler).recorder.store.close()
    [chain] = StoreReader.from_url(store_url).chains()
    assert (chain.outcome, chain.reason) == ("blocked", "scheme:file")
    assert crawler.stats.get_value("ssrf/blocked/scheme:file") == 1  # type: ignore[union-attr]


def test_file_data_s3_and_ftp_download_handlers_are_off() -> None:
    # What Scrapy's DownloadHandlers loads: the merged table without the None entries.
    handlers = without_none_values(project_settings().getwithbase("DOWNLOAD_HANDLERS"))
    assert not {"file", "data", "s3", "ftp"} & set(handlers)
    assert {"http", "https"} <= set(handlers)


def test_a_request_through_a_proxy_is_refused_unless_proxies_are_allowed() -> None:
    proxied = Request("https://example.com/", meta={"proxy": "http://proxy.example:3128"})
    crawler = get_crawler(settings_dict=GUARDED)
    crawler.stats.open_spider()  # type: ignore[union-attr]
    with pytest.raises(AddressBlocked) as refused:
        SSRFGuardMiddleware.from_crawler(crawler).process_request(proxied)
    assert refused.value.reason == "proxy"
    allowing = get_crawler(settings_dict={**GUARDED, "SSRF_ALLOW_PROXY": True})
    assert SSRFGuardMiddleware.from_crawler(allowing).process_request(proxied) is None


@pytest.mark.parametrize("variable", ["http_proxy", "HTTPS_PROXY"])
def test_a_proxy_in_the_environment_stops_the_guarded_crawl_with_the_reason(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "http://proxy.example:3128")
    with pytest.raises(ProxyWithGuard, match="SSRF_ALLOW_PROXY=True if the proxy enforces"):
        SSRFGuardMiddleware.from_crawler(get_crawler(settings_dict=GUARDED))
    for allowed in ({"SSRF_ALLOW_PROXY": True}, {"HTTPPROXY_ENABLED": False}):
        SSRFGuardMiddleware.from_crawler(get_crawler(settings_dict={**GUARDED, **allowed}))


def test_a_carried_key_never_stands_for_the_url() -> None:
    """A request whose meta carries the key of an allowed page (as a stored request can) is
    judged by its own URL."""
    crawler = get_crawler(settings_dict={**GUARDED, "SSRF_ALLOWED_HOSTS": ["example.com"]})
    crawler.stats.open_spider()  # type: ignore[union-attr]
    middleware = SSRFGuardMiddleware.from_crawler(crawler)
    url = "http://10.0.0.1/admin"
    meta = {"dedupe_key": "r2|http://example.com/admin", "dedupe_key_url": url}
    with pytest.raises(AddressBlocked) as refused:
        middleware.process_request(Request(url, meta=meta))
    assert refused.value.reason == "private"
