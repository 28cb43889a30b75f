"""resolve_link: RFC 3986 §5.4 resolution, junk filtering, URLs Scrapy can request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request

from bloom_frontier.canonical import resolve_link
from bloom_frontier.canonical.resolve import LinkResolver

DATA = Path(__file__).parent / "data"
#: Properties, not timings: a loaded CI machine must not fail them on hypothesis' deadline.
no_deadline = settings(deadline=None)
RFC_RESOLUTION = json.loads((DATA / "rfc3986_resolution.json").read_text(encoding="utf-8"))
#: Where our answer is not the RFC's expected string, and why.
RFC_POLICY = {
    "g:h": (None, "not http(s): nothing to fetch"),
    "": (None, "an empty href is junk, not a link to the page itself"),
}


def expected_fetch_url(case: dict) -> str | None:
    """The RFC's answer as a fetch URL: non-strict ``http:g`` (like browsers), no fragment,
    and ``/`` for an empty path (RFC 3986 §6.2.3; Scrapy requests the same)."""
    if case["ref"] in RFC_POLICY:
        return RFC_POLICY[case["ref"]][0]
    url = case.get("expected_alt", case["expected"]).partition("#")[0]
    scheme, _, rest = url.partition("://")
    return url if "/" in rest else f"{scheme}://{rest}/"


@pytest.mark.parametrize("case", RFC_RESOLUTION, ids=lambda case: case["ref"] or "<empty>")
def test_rfc3986_resolution_examples(case: dict) -> None:
    assert resolve_link(case["base"], case["ref"]) == expected_fetch_url(case)


def test_rfc3986_examples_are_all_there() -> None:
    assert len(RFC_RESOLUTION) == 42
    assert sum("expected_alt" in case for case in RFC_RESOLUTION) == 1  # http:g


BASE = "https://site.example/dir/page.html?x=1"

JUNK = [
    "javascript:alert(1)",
    " javascript:alert(1)",
    "JavaScript:void(0)",
    "\x01\x02javascript:alert(1)",
    "java\tscript:alert(1)",
    "java\nscript:alert(1)",
    "mailto:someone@example.com",
    "MAILTO:someone@example.com",
    "tel:+1-555-0100",
    " Tel:+1",
    "data:text/html,<b>x</b>",
    "ftp://files.example/a",
    "file:///etc/passwd",
    "about:blank",
    "",
    "   ",
    "\t\r\n",
    "\x00",
    "http://",
    "https://:443/path",
    "http://user@/path",
    "http://Bü\u0378cher/",  # non-ASCII host that IDNA refuses: cannot be requested
    # what Scrapy's Request() refuses to build is not a link either
    "http://f:999999/c",
    "http://f:b/c",
    "http://f::80/c",
    "http://2001::1/",
    "http://[::1.2.3.]/",
    "http://[::1]x/",
    "http://a]b/",
    "http://[www.example.com]/",
]


@pytest.mark.parametrize("href", JUNK)
def test_junk_hrefs_are_dropped(href: str) -> None:
    assert resolve_link(BASE, href) is None


def test_relative_links_need_an_http_base() -> None:
    assert resolve_link("mailto:a@b.example", "page.html") is None
    assert resolve_link("not a url", "page.html") is None
    assert resolve_link("not a url", "https://ok.example/") == "https://ok.example/"
    assert resolve_link("ftp://files.example/", "//other.example/") is None
    assert resolve_link("ftp://files.example/", "/\\other.example/") is None


RESOLVED = [
    # as written: no sorting, no parameter removal, case and escapes kept
    ("other.html?b=2&a=1&utm_source=x", "https://site.example/dir/other.html?b=2&a=1&utm_source=x"),
    ("/A/%7euser/%2F?Q=%41", "https://site.example/A/%7euser/%2F?Q=%41"),
    ("HTTP://Other.Example:80/x", "http://Other.Example:80/x"),
    ("?y=2", "https://site.example/dir/page.html?y=2"),
    ("#top", "https://site.example/dir/page.html?x=1"),
    ("../up#frag", "https://site.example/up"),
    # surrounding whitespace/C0 stripped, embedded tab/CR/LF removed
    ("  \n other.html \t", "https://site.example/dir/other.html"),
    ("\x00\x1fother.html\x7f", "https://site.example/dir/other.html%7F"),
    ("oth\ter\r\n.html", "https://site.example/dir/other.html"),
    # only what no URI may contain gets percent-encoded (UTF-8)
    ("a b.html?q=a b", "https://site.example/dir/a%20b.html?q=a%20b"),
    ("/été?q=ü", "https://site.example/%C3%A9t%C3%A9?q=%C3%BC"),
    ('/a"b<c>d`e{f}g|h^i', "https://site.example/a%22b%3Cc%3Ed%60e%7Bf%7Dg%7Ch%5Ei"),
    ("/100%/x%zz?p=%", "https://site.example/100%25/x%25zz?p=%25"),
    ("/a[1]?b[]=c", "https://site.example/a[1]?b[]=c"),
    # hosts: IDNA for non-ASCII, ports and userinfo kept
    ("//Bücher.example/x", "https://xn--bcher-kva.example/x"),
    ("http://user:pw@例え.jp:8080/p", "http://user:pw@xn--r8jz45g.jp:8080/p"),
    ("//[::1]:8443/", "https://[::1]:8443/"),
    ("//[0:0::1]:0080/", "https://[::1]:0080/"),
    ("http://us[er]@h.example/", "http://us%5Ber%5D@h.example/"),
    # browser readings for http(s)
    ("\\\\evil.example\\a\\b?c\\d", "https://evil.example/a/b?c%5Cd"),
    ("///other.example/x", "https://other.example/x"),
    ("https:///other.example/x", "https://other.example/x"),
    ("https:other.html", "https://site.example/dir/other.html"),
    ("http:other.example/x", "http://other.example/x"),
    ("http:/other.example/x", "http://other.example/x"),
]


@pytest.mark.parametrize(("href", "expected"), RESOLVED)
def test_resolution(href: str, expected: str) -> None:
    assert resolve_link(BASE, href) == expected


def test_base_without_path_resolves_like_root() -> None:
    assert resolve_link("http://site.example", "a/b") == "http://site.example/a/b"
    assert resolve_link("http://site.example", "?q") == "http://site.example/?q"


@pytest.mark.parametrize("base", [None, 42, b"http://a/"])
def test_non_string_arguments_are_junk(base: object) -> None:
    assert resolve_link(base, "x") is None  # type: ignore[arg-type]
    assert resolve_link("http://a/", base) is None  # type: ignore[arg-type]


def assert_requestable(url: str | None) -> None:
    """Scrapy can request it: a Request builds; absolute http(s), ASCII, no whitespace."""
    if url is None:
        return
    Request(url)
    assert url.startswith(("http://", "https://"))
    assert url.isascii()
    assert not any(char.isspace() or ord(char) < 0x20 or char == "\x7f" for char in url)
    assert "#" not in url


@no_deadline
@given(st.text(), st.text())
def test_never_raises_on_arbitrary_text(base: str, href: str) -> None:
    assert_requestable(resolve_link(base, href))
    assert_requestable(resolve_link(BASE, href))


HREF_ALPHABET = st.sampled_from([*"/.?#&=%:@\\ \t\nabc€é", "..", "//", "http:", "JavaScript:"])


@no_deadline
@given(st.lists(HREF_ALPHABET, max_size=20).map("".join))
def test_urlish_hrefs_resolve_to_requestable_urls(href: str) -> None:
    assert_requestable(resolve_link(BASE, href))


def test_resolving_twice_changes_nothing() -> None:
    for href, _ in RESOLVED:
        url = resolve_link(BASE, href)
        assert url is not None
        assert resolve_link(BASE, url) == url


WHATWG_CASES = [
    case
    for case in json.loads((DATA / "whatwg_urltestdata.json").read_text(encoding="utf-8"))
    if isinstance(case, dict)
]


@pytest.mark.parametrize("case", WHATWG_CASES, ids=lambda case: repr(case["input"])[:60])
def test_every_whatwg_input_resolves_to_junk_or_a_requestable_url(case: dict) -> None:
    assert_requestable(resolve_link(case.get("base") or case["input"], case["input"]))


#: One resolver for every example below: results remembered for one page must hold on others.
SHARED_RESOLVER = LinkResolver(capacity=500)
BASE_ALPHABET = st.sampled_from(
    [
        "http://a",
        "https://A:443",
        "http://u@b",
        "ftp://a",
        "mailto:x",
        "/",
        "/d/",
        "d/",
        "x",
        "?q",
        "#f",
        "..",
    ]
)


@no_deadline
@given(
    st.lists(BASE_ALPHABET, max_size=4).map("".join),
    st.lists(st.lists(HREF_ALPHABET, max_size=8).map("".join), max_size=12),
)
def test_a_link_resolver_answers_as_resolve_link(base: str, hrefs: list[str]) -> None:
    """Links resolved once for many pages (by directory, a page's fragments once) resolve
    as they would alone, on every base, page after page."""
    for page in (base, base + "x", base + "/y/"):
        assert list(SHARED_RESOLVER.resolve(page, hrefs)) == [
            resolve_link(page, href) for href in hrefs
        ]


def test_a_link_resolver_resolves_against_each_pages_directory() -> None:
    resolver = LinkResolver()
    hrefs = ["../up.html", "same.html", "#top", "/root", "https://other/x", "mailto:a@b", ""]
    assert list(resolver.resolve("http://a/d/e/page.html?q", hrefs)) == [
        "http://a/d/up.html",
        "http://a/d/e/same.html",
        "http://a/d/e/page.html?q",
        "http://a/root",
        "https://other/x",
        None,
        None,
    ]
    assert list(resolver.resolve("http://a/f/other.html", hrefs))[:3] == [
        "http://a/up.html",
        "http://a/f/same.html",
        "http://a/f/other.html",
    ]


def test_a_link_resolver_drops_fragments_but_nothing_before_them() -> None:
    resolver = LinkResolver()
    hrefs = ["p.html#a", "p.html#b", "p.html #a", "p.html\t#b ", "p.html?x#a", "p.html?x #b"]
    for base in ("http://a/d/one.html", "http://a/d/two.html", "http://a/e/"):
        assert list(resolver.resolve(base, hrefs)) == [resolve_link(base, h) for h in hrefs]
    assert list(resolver.resolve("http://a/d/x", hrefs)) == [
        "http://a/d/p.html",
        "http://a/d/p.html",
        "http://a/d/p.html%20",
        "http://a/d/p.html",
        "http://a/d/p.html?x",
        "http://a/d/p.html?x%20",
    ]
