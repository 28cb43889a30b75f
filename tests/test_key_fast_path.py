"""The dedupe key's fast path and caches give exactly the general path's keys.

:func:`dedupe_key` takes a clean URL (plain host, nothing to encode) through a per-origin
cache and stage 1's query-order cache; everything else goes through :func:`_derive`, the
general path :func:`explain` also uses. A difference between the two is a wrong key (a page
never fetched, or fetched twice), so they are compared on generated URLs that mix clean and
messy parts, under the default and customized rules, with the caches cold, warm and
overflowing.
"""

from __future__ import annotations

import dataclasses
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.canon import make_corpus
from bloom_frontier.canonical import InvalidURL, canonicalize, dedupe_key, structural
from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet, _derive

#: Timing is for bench/; a loaded CI machine must not turn a slow example into a failure.
NO_DEADLINE = settings(deadline=None, max_examples=600)

CUSTOM_RULES = DEFAULT_RULES.with_host_rules(
    {
        "example.com": {"strip": ["ref"], "disable": ["slashes"]},
        "shop.example.net/cart": {"keep_only": ["id"]},
        "docs.example.org/api/*": {"keep_only": ["v"]},
        "*": {"disable": ["tracking:gclid"]},
    }
)
SCHEMES = st.sampled_from(["http", "https", "HTTP", "Https", "ftp"])
HOSTS = st.sampled_from(
    [
        "example.com",
        "Example.COM",
        "shop.example.net",
        "docs.example.org",
        "www.youtube.com",
        "youtu.be",
        "twitter.com",
        "news.ycombinator.com",
        "127.0.0.1",
        "0x7f.1",
        "xn--bcher-kva.example",
        "bücher.example",
        "\uff25\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0ecom",  # fullwidth Example.com
        "faß.de",
        "x-.ß",
        "\ud800.example",
        "a\\b.example",
        "%zz.example",
        "ex ample.com",
        "ex%41mple.com",
        "[2001:db8::1]",
        "user:pw@example.com",
        "a..b",
        "xn--a.example",
        "",
    ]
)
PORTS = st.sampled_from(["", ":", ":80", ":443", ":8080", ":0080", ":99999", ":x"])
SEGMENT = st.text(
    string.ascii_letters + string.digits + "-._~%;=/é ", max_size=10
) | st.sampled_from(
    [".", "..", "%2e", "%41", "%7e", "%zz", "", ";jsessionid=ABC", "watch", "embed", "cart", "api"]
)
PATH = st.lists(SEGMENT, max_size=5).map(lambda segments: "".join("/" + s for s in segments))
NAME = st.text(string.ascii_lowercase + "_=%", max_size=6) | st.sampled_from(
    ["utm_source", "UTM_Medium", "gclid", "fbclid", "si", "ref_src", "ref", "id", "v", "p", "a"]
)
VALUE = st.text(string.ascii_letters + string.digits + "-_%^=é'", max_size=18) | st.sampled_from(
    ["dQw4w9WgXcQ", "abcdefghijklmnop", "twsrc%5Etfw", "twsrc^tfw", ""]
)
PARAM = st.one_of(st.just(""), NAME, st.builds("{}={}".format, NAME, VALUE))
QUERY = st.none() | st.lists(PARAM, max_size=6).map("&".join)
FRAGMENT = st.sampled_from(["", "#", "#top", "#a?b=1"])


@st.composite
def urls(draw: st.DrawFn) -> str:
    """A URL that may or may not be clean: the fast path's every branch and its fallbacks."""
    query = draw(QUERY)
    return (
        f"{draw(SCHEMES)}://{draw(HOSTS)}{draw(PORTS)}{draw(PATH)}"
        + ("" if query is None else f"?{query}")
        + draw(FRAGMENT)
    )


def general_key(url: str, rules: RuleSet) -> str:
    """The key by the general path alone: stage 1, then the rules on its string."""
    return _derive(url, rules, None)[2]


def outcome(key_of, url: str, rules: RuleSet) -> str:
    try:
        return key_of(url, rules)
    except InvalidURL as error:
        return f"InvalidURL {error.reason} {error.url!r} {error.detail}"


def general_canonical(url: str) -> str:
    """Stage 1 by its general path alone: the clean and encodable fast paths matching
    nothing."""
    never = re.compile(r"(?!)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(structural, "CLEAN_URL", never)
        patch.setattr(structural, "ENCODABLE_URL", never)
        return canonicalize(url)


def sorted_query_reference(query: str) -> str:
    """Stage 1's query rule, written plainly: empty parameters dropped, stable sort by name."""
    params = [param for param in query.split("&") if param]
    return "&".join(sorted(params, key=lambda param: param.partition("=")[0]))


@NO_DEADLINE
@given(urls(), st.sampled_from([DEFAULT_RULES, CUSTOM_RULES]))
def test_fast_path_gives_the_general_paths_key(url: str, rules: RuleSet) -> None:
    assert outcome(dedupe_key, url, rules) == outcome(general_key, url, rules)


#: Path and query text a browser would encode, and what cleaning removes or cannot encode.
TO_ENCODE = st.text(string.ascii_letters + "%=&/.?#é €\"<>\\'\t\x7f\ud800", max_size=12)


@NO_DEADLINE
@given(urls(), TO_ENCODE, TO_ENCODE, st.sampled_from([DEFAULT_RULES, CUSTOM_RULES]))
def test_stage_1_fast_paths_give_the_general_paths_form(
    url: str, path: str, query: str, rules: RuleSet
) -> None:
    """Clean URLs, and URLs with a path or query to encode (non-ASCII, spaces, quotes)."""
    for one in (url, f"{url}/{path}?{query}", f"https://example.com/{path}?{query}#{path}"):
        expected = outcome(lambda u, _: general_canonical(u), one, rules)
        assert outcome(lambda u, _: canonicalize(u), one, rules) == expected
        assert outcome(dedupe_key, one, rules) == outcome(general_key, one, rules)


@NO_DEADLINE
@given(st.lists(PARAM, min_size=2, max_size=7).map("&".join))
def test_query_order_cache_sorts_like_the_rule(query: str) -> None:
    url = f"http://example.com/?{query}"
    expected = sorted_query_reference(structural.normalize_query(query))
    assert canonicalize(url) == ("http://example.com/?" + expected).rstrip("?")
    assert canonicalize(url) == canonicalize(url)  # warm cache, same answer


def test_corpus_keys_equal_on_both_paths_with_cold_warm_and_full_caches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The benchmark's corpus (every variant kind): fast path == general path, also when the
    caches overflow and are emptied over and over (a tiny bound)."""
    urls = [link.url for link in make_corpus(6000, 0.4, seed=7)]
    expected = [outcome(general_key, url, DEFAULT_RULES) for url in urls]
    fresh = dataclasses.replace(DEFAULT_RULES)  # its own, empty caches
    for _ in range(2):  # cold, then warm
        assert [outcome(dedupe_key, url, fresh) for url in urls] == expected
    monkeypatch.setattr(structural, "ORDER_CACHE_SIZE", 3)
    monkeypatch.setattr(structural, "_ORDERS", {})
    monkeypatch.setattr("bloom_frontier.canonical.rules.HOST_CACHE_SIZE", 3)
    tiny = dataclasses.replace(DEFAULT_RULES)
    assert [outcome(dedupe_key, url, tiny) for url in urls] == expected
    assert len(tiny._origin_cache) <= 3 and len(structural._ORDERS) <= 3
