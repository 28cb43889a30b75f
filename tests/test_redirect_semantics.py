"""The redirect-map semantics (:mod:`bloom_frontier.redirectmap.semantics`) on records built in
memory: the options a user chooses and the rules every format follows."""

from __future__ import annotations

import doctest
import importlib
import io

import pytest

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.pipelines.reader import StoredChain, StoredHop
from bloom_frontier.pipelines.records import FETCHED, SEEN
from bloom_frontier.redirectmap.apache import write_apache
from bloom_frontier.redirectmap.matching import (
    Entry,
    dropped_param_pattern,
    request_key,
    server_entries,
)
from bloom_frontier.redirectmap.semantics import MapOptions, SourceRow, redirect_sources
from bloom_frontier.shorteners import Shorteners
from tests.record_builders import chain, hop

MODULES = ["semantics", "matching", "nginx", "apache", "report"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"bloom_frontier.redirectmap.{name}")
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


def stored(chain_id: str, outcome: str, *hops: tuple[str, str, int], flag: str | None = None):
    built = chain(chain_id, outcome, *(hop(s, t, st) for s, t, st in hops), flag=flag)
    return StoredChain(
        built.chain_id,
        built.start_url,
        built.start_key,
        built.final_url,
        outcome,
        None,
        flag,
        len(built.hops),
        float(chain_id),
        tuple(
            StoredHop(chain_id, i, h.source, h.source_key, h.status, h.permanent, h.via,
                      h.location, h.target, h.target_key, h.at)
            for i, h in enumerate(built.hops)
        ),
    )  # fmt: skip


def page(url: str, status: int = 200) -> dict:
    return {"fetch_url": url, "final_url": url, "key": dedupe_key(url), "status": status}


def rows_by_source(chains, pages, **options) -> dict[str, SourceRow]:
    return {row.source: row for row in redirect_sources(chains, pages, MapOptions(**options))}


TRACKED = "https://new.example/p?id=1&utm_source=mail&fbclid=x"


def test_targets_drop_what_the_key_drops_unless_kept() -> None:
    chains = [stored("1", FETCHED, ("https://old.example/p", TRACKED, 301))]
    pages = [page(TRACKED)]
    plain = rows_by_source(chains, pages)["https://old.example/p"]
    assert plain.target == "https://new.example/p?id=1"
    kept = rows_by_source(chains, pages, keep_tracking=True)["https://old.example/p"]
    assert kept.target == TRACKED


def test_old_host_that_only_redirects_is_an_own_host_but_other_hosts_are_not() -> None:
    chains = [
        stored("1", FETCHED, ("https://old.example/a", "https://new.example/a", 301)),
        # A link to another site whose redirect the crawl followed mid-chain.
        stored(
            "2",
            FETCHED,
            ("https://new.example/out", "https://cdn.other/x", 302),
            ("https://cdn.other/x", "https://new.example/b", 302),
        ),
    ]
    rows = rows_by_source(chains, [page("https://new.example/a"), page("https://new.example/b")])
    assert rows["https://old.example/a"].entry
    assert rows["https://new.example/out"].target == "https://new.example/b"
    assert rows["https://cdn.other/x"].skip == "other-host"
    extra = rows_by_source(chains, [page("https://new.example/b")], hosts=frozenset({"cdn.other"}))
    assert extra["https://cdn.other/x"].entry


def test_every_host_of_the_crawls_shortener_list_is_never_an_entry() -> None:
    """The list the crawl resolves short links with (hosts.txt and ``SHORTENER_HOSTS``),
    not a list of its own: ``j.mp``, ``v.gd``, ``wp.me`` and a user's host are no entries."""
    hosts = ["j.mp", "v.gd", "wp.me", "www.bit.ly", "go.example"]
    chains = [
        stored(str(number), FETCHED, (f"http://{host}/s1", "https://e.org/target", 301))
        for number, host in enumerate(hosts, 1)
    ]
    chains.append(stored("9", FETCHED, ("https://e.org/old", "https://e.org/target", 301)))
    pages = [page("https://e.org/target")]
    rows = rows_by_source(chains, pages, shorteners=Shorteners(["go.example"]))
    assert {rows[f"http://{host}/s1"].skip for host in hosts} == {"shortener"}
    assert rows["https://e.org/old"].entry
    entries, _ = server_entries(list(rows.values()))
    assert [entry.source for entry in entries] == ["https://e.org/old"]
    # Without the setting, go.example is one of the crawl's hosts like any other.
    assert rows_by_source(chains, pages)["http://go.example/s1"].entry


def test_unknown_end_is_no_entry() -> None:
    rows = rows_by_source([stored("1", SEEN, ("https://e.org/a", "https://e.org/b", 301))], [])
    assert (rows["https://e.org/a"].outcome, rows["https://e.org/a"].entry) == ("unresolved", False)


def test_variants_of_one_page_collapse_and_conflicts_are_reported() -> None:
    chains = [
        stored("1", FETCHED, ("https://e.org/q?a=1&b=2", "https://e.org/one", 301)),
        stored("2", FETCHED, ("https://e.org/q?b=2&a=1&utm_medium=x", "https://e.org/one", 301)),
        stored("3", FETCHED, ("https://e.org/r?a=1", "https://e.org/one", 301)),
        stored(
            "4",
            FETCHED,
            ("https://e.org/r?a=1&gclid=2", "https://e.org/r2", 302),
            ("https://e.org/r2", "https://e.org/two", 302),
        ),
    ]
    pages = [page("https://e.org/one"), page("https://e.org/two")]
    entries, problems = server_entries(redirect_sources(chains, pages))
    sources = sorted(entry.source for entry in entries)
    assert sources == ["https://e.org/q?a=1&b=2", "https://e.org/r2", "https://e.org/r?a=1"]
    assert problems == [
        "https://e.org/r?a=1&gclid=2 and https://e.org/r?a=1 are one page with different "
        "targets: kept https://e.org/one (301)"
    ]


def test_http_to_https_is_an_entry_but_a_tracking_twin_of_its_target_is_not() -> None:
    chains = [
        stored(
            "1",
            FETCHED,
            ("http://e.org/a", "https://e.org/a", 301),
            ("https://e.org/a", "https://e.org/a?utm_source=x", 302),
        )
    ]
    rows = rows_by_source(chains, [page("https://e.org/a?utm_source=x")])
    assert (rows["http://e.org/a"].target, rows["http://e.org/a"].status) == (
        "https://e.org/a",
        302,  # the 302 after the same-key hop counts
    )
    assert rows["https://e.org/a"].skip == "self"


def test_sources_no_server_can_match_are_left_out_and_said() -> None:
    chains = [
        stored("1", FETCHED, ("https://e.org/a%0Ab", "https://e.org/one", 301)),
        stored("2", FETCHED, ("https://e.org/%FF", "https://e.org/one", 301)),
    ]
    entries, problems = server_entries(redirect_sources(chains, [page("https://e.org/one")]))
    assert entries == []
    assert problems == [
        "left out https://e.org/a%0Ab: decoded path holds control characters",
        "left out https://e.org/%FF: decoded path is not UTF-8",
    ]


def apache_file(count: int) -> str:
    entries = []
    for number in range(count):
        source = f"https://old.example/section/{number}.html" + ("?id=7" if number % 2 else "")
        target = f"https://new.example/articles/{number}"
        entries.append(Entry(request_key(source), target, 301, source))
    out = io.StringIO()
    assert write_apache(entries, out) == count
    return out.getvalue()


def test_apache_file_states_the_tracking_pattern_once_and_grows_by_a_rule_per_entry() -> None:
    small, large = apache_file(100), apache_file(200)
    assert small.count(dropped_param_pattern()) == large.count(dropped_param_pattern()) == 1
    # Each rule: a comment, three conditions and the rule, about 300 bytes for these URLs
    # (each rule repeated the ~2 KB pattern before).
    per_rule = (len(large) - len(small)) / 100
    assert 200 < per_rule < 400, per_rule
