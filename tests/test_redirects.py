"""Redirect chains recorded by a real crawl of the local redirect site.

What the server saw is the proof of what was fetched; the store and the ``scrapy redirects``
output are what a user reads afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bloom_frontier.canonical import RULES_VERSION
from bloom_frontier.pipelines.reader import StoreReader
from tests.redirect_server import Crawl, command_rows, run_crawl, scrapy


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    return run_crawl(tmp_path_factory.mktemp("redirects"))


def hops(crawl: Crawl, start: str) -> list[tuple[str | None, int, str, str | None]]:
    return [
        (crawl.path(h.source_url), h.status, h.location, crawl.path(h.target_url))
        for h in crawl.chains[start].hops
    ]


@pytest.mark.parametrize(
    ("start", "status", "location", "target"),
    [
        ("/r/301", 301, "/final/301", "/final/301"),
        ("/r/302", 302, "{origin}/final/302", "/final/302"),
        ("/r/303", 303, "../final/303", "/final/303"),
        ("/r/307", 307, "final-307", "/r/final-307"),
        ("/r/308", 308, "//127.0.0.1:{port}/final/308", "/final/308"),
    ],
)
def test_each_status_recorded_with_raw_and_resolved_location(
    crawl: Crawl, start: str, status: int, location: str, target: str
) -> None:
    raw = location.format(origin=crawl.server.url, port=crawl.server.port)
    chain = crawl.chains[start]
    assert hops(crawl, start) == [(start, status, raw, target)]
    assert chain.hops[0].permanent is (status in {301, 308})
    assert chain.outcome == "fetched"
    assert crawl.path(chain.final_url) == target
    assert crawl.hits[target] == 1
    page = crawl.pages[start]
    assert (crawl.path(page["final_url"]), page["status"]) == (target, 200)


def test_multi_hop_chain_is_ordered_and_ends_on_the_page(crawl: Crawl) -> None:
    assert hops(crawl, "/chain/1") == [
        ("/chain/1", 301, "/chain/2", "/chain/2"),
        ("/chain/2", 302, "/chain/3?utm_source=chain", "/chain/3?utm_source=chain"),
        ("/chain/3?utm_source=chain", 307, "/final/chain", "/final/chain"),
    ]
    assert crawl.chains["/chain/1"].outcome == "fetched"
    times = [hop.at for hop in crawl.chains["/chain/1"].hops]
    assert times == sorted(times)


@pytest.mark.parametrize(
    ("start", "fetched"),
    [
        ("/loop/a", ["/loop/a", "/loop/b"]),
        ("/loop/self", ["/loop/self"]),
        # b -> a?utm_source=loop -> b: the loop closes through a tracking-parameter variant.
        ("/loop/variant/b", ["/loop/variant/b", "/loop/variant/a?utm_source=loop"]),
    ],
)
def test_loops_detected_by_key_and_each_url_fetched_once(
    crawl: Crawl, start: str, fetched: list[str]
) -> None:
    chain = crawl.chains[start]
    assert chain.outcome == "loop"
    assert len(chain.hops) == len(fetched)
    assert crawl.path(chain.hops[-1].target_url) == start
    for path in fetched:
        assert crawl.hits[path] == 1, path


def test_spiral_stops_at_the_hop_cap(crawl: Crawl) -> None:
    chain = crawl.chains["/spiral/1"]
    assert chain.outcome == "too-many-hops"
    assert len(chain.hops) == 10
    spiral = [path for path in crawl.hits if path.startswith("/spiral/")]
    assert max(path.count("/x") for path in spiral) == 9  # the 10th target is never fetched
    assert all(count == 1 for path, count in crawl.hits.items() if path in spiral)


def test_hop_cap_is_a_setting(tmp_path: Path) -> None:
    crawl = run_crawl(tmp_path, "-s", "REDIRECT_MAX_HOPS=3")
    assert len(crawl.chains["/spiral/1"].hops) == 3
    assert max(p.count("/x") for p in crawl.hits if p.startswith("/spiral/")) == 2
    assert crawl.chains["/chain/1"].outcome == "too-many-hops"
    assert crawl.hits["/final/chain"] == 0


def test_keys_follow_the_crawls_host_rules(crawl: Crawl, tmp_path: Path) -> None:
    # /to-custom redirects to /custom?sid=2; the start page links /custom?sid=1.
    assert crawl.chains["/to-custom"].outcome == "fetched"
    assert crawl.hits["/custom?sid=2"] == 1
    ruled = run_crawl(tmp_path, "-s", 'CANON_HOST_RULES={"127.0.0.1": {"strip": ["sid"]}}')
    chain = ruled.chains["/to-custom"]
    assert chain.outcome == "seen"  # the key of /custom?sid=1, under the crawl's rules
    assert ruled.hits["/custom?sid=2"] == 0
    assert chain.hops[0].target_key is not None
    assert chain.hops[0].target_key.startswith(f"{RULES_VERSION}+")  # a customized ruleset


def test_redirect_to_the_same_key_is_followed(crawl: Crawl) -> None:
    chain = crawl.chains["/same"]
    assert chain.outcome == "fetched"
    assert crawl.path(chain.final_url) == "/same?utm_source=self"
    assert chain.hops[0].source_key == chain.hops[0].target_key
    assert crawl.hits["/same?utm_source=self"] == 1


def test_target_seen_elsewhere_is_recorded_but_fetched_once(crawl: Crawl) -> None:
    # "/" links both /to-linked (301 -> /linked) and /linked itself.
    assert hops(crawl, "/to-linked") == [("/to-linked", 301, "/linked", "/linked")]
    assert crawl.hits["/linked"] == 1
    assert crawl.chains["/to-linked"].outcome in {"fetched", "seen"}


@pytest.mark.parametrize(
    ("start", "flag"),
    [("/members", "soft-404:login"), ("/moved-home", "soft-404:homepage")],
)
def test_soft_404_redirects_are_flagged(crawl: Crawl, start: str, flag: str) -> None:
    assert crawl.chains[start].flag == flag


def test_redirected_page_is_stored_with_its_flag(crawl: Crawl) -> None:
    page = crawl.pages["/members"]
    assert crawl.path(page["final_url"]) == "/login?next=/members"
    assert page["flag"] == "soft-404:login"


@pytest.mark.parametrize(
    ("start", "via", "target"),
    [
        ("/refresh-header", "refresh-header", "/final/refresh"),
        ("/meta-refresh", "meta-refresh", "/final/meta"),
    ],
)
def test_refreshes_are_hops(crawl: Crawl, start: str, via: str, target: str) -> None:
    chain = crawl.chains[start]
    assert [(h.via, h.status, crawl.path(h.target_url)) for h in chain.hops] == [(via, 200, target)]
    assert chain.outcome == "fetched"
    assert crawl.hits[target] == 1


def test_unfollowable_location_ends_the_chain_as_error(crawl: Crawl) -> None:
    chain = crawl.chains["/bad-location"]
    assert (chain.outcome, chain.reason) == ("error", "unfollowable-location")
    assert chain.hops[0].location == "javascript:alert(1)"
    assert chain.hops[0].target_url is None


def test_failed_download_ends_the_chain_as_error(crawl: Crawl) -> None:
    chain = crawl.chains["/dead-end"]
    assert chain.outcome == "error"
    assert chain.reason is not None and "ConnectionRefused" in chain.reason
    assert chain.final_url == "http://127.0.0.1:1/gone"


def test_every_redirected_url_has_its_key_stored(crawl: Crawl) -> None:
    store = StoreReader.from_url(crawl.store_url)
    aliases = {crawl.path(a["url"]): a for a in store.url_aliases()}
    store.close()
    for path in ("/chain/1", "/chain/2", "/chain/3?utm_source=chain", "/final/chain"):
        assert aliases[path]["rules_version"] == aliases[path]["key"].partition("|")[0]
    assert aliases["/chain/3?utm_source=chain"]["key"].endswith("/chain/3")


def test_redirect_map_jsonl(crawl: Crawl) -> None:
    rows = command_rows("redirects", crawl.store_url)
    by_source = {crawl.path(row["source"]): row for row in rows}
    # One line per redirect source (every hop source), with where its chain finally leads.
    assert {k for k in by_source if k and k.startswith("/chain/")} == {
        "/chain/1",
        "/chain/2",
        "/chain/3?utm_source=chain",
    }
    first = by_source["/chain/1"]
    assert (crawl.path(first["target"]), first["status"]) == ("/final/chain", 302)
    assert (first["hops"], first["hop_statuses"], first["outcome"]) == (3, "301 302 307", "fetched")
    assert first["entry"] is True
    assert (by_source["/chain/2"]["hops"], by_source["/chain/2"]["status"]) == (2, 302)
    assert by_source["/chain/3?utm_source=chain"]["status"] == 307
    assert (by_source["/loop/a"]["outcome"], by_source["/loop/a"]["target"]) == ("loop", None)
    # A blocked chain never shows the private address as a target.
    assert (by_source["/out/two"]["outcome"], by_source["/out/two"]["target"]) == ("blocked", None)
    assert by_source["/out/two"]["entry"] is False
    assert by_source["/spiral/1"]["outcome"] == "too-many-hops"
    assert (by_source["/members"]["flag"], by_source["/members"]["skip"]) == (
        "soft-404:login",
        "flagged",
    )
    assert by_source["/same"]["skip"] == "self"  # /same -> /same?utm_source=self: itself


def test_redirect_map_permanent_only(crawl: Crawl) -> None:
    rows = command_rows("redirects", crawl.store_url, "--permanent-only")
    sources = {crawl.path(row["source"]) for row in rows}
    assert {row["status"] for row in rows} <= {301, 308}
    assert all(row["permanent"] for row in rows)
    # /chain/1 is 301 then 302 then 307: left out entirely, not cut short at /chain/2.
    assert "/chain/1" not in sources and "/chain/2" not in sources
    assert {"/r/301", "/r/308", "/to-linked"} <= sources
    # /out/two (301) -> /out/two/next (302) -> metadata address: neither is anywhere.
    assert not {"/out/two", "/out/two/next"} & sources


def test_redirect_map_nginx(crawl: Crawl) -> None:
    result = scrapy("redirects", "-s", f"STORE_URL={crawl.store_url}", "--format", "nginx")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f'    "http://127.0.0.1/chain/1" "{crawl.server.url}/final/chain";' in lines
    assert not [line for line in lines if "/loop/" in line or "/members" in line]
    assert lines[-1] == "}"


def test_crawl_into_postgresql(tmp_path: Path, pg_url: str, crawl: Crawl) -> None:
    other = run_crawl(tmp_path, store_url=pg_url)
    assert {start: (c.outcome, len(c.hops)) for start, c in other.chains.items()} == {
        start: (c.outcome, len(c.hops)) for start, c in crawl.chains.items()
    }
    assert set(other.pages) == set(crawl.pages)
    # Every chain starts at a link of the home page: each names it, in either store.
    assert {other.path(c.referrer) for c in other.chains.values()} == {"/"}


def test_shared_frontier_records_the_same_chains(tmp_path: Path, redis_url: str) -> None:
    crawl = run_crawl(tmp_path, redis_url=redis_url)
    outcomes = {start: chain.outcome for start, chain in crawl.chains.items()}
    assert outcomes["/chain/1"] == "fetched"
    assert outcomes["/loop/variant/b"] == "loop"
    assert outcomes["/spiral/1"] == "too-many-hops"
    assert outcomes["/out/metadata"] == "blocked"
    assert outcomes["/same"] == "fetched"
    assert len(crawl.chains["/chain/1"].hops) == 3
    # The Referer travels with each request through Redis: every chain names the home page.
    assert {crawl.path(c.referrer) for c in crawl.chains.values()} == {"/"}
    assert crawl.hits["/linked"] == 1
