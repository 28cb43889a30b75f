"""Stage 1 (bloom_frontier.canonical.structural): RFC 3986 normalization, WHATWG hosts, failing
closed.

Reference data in tests/data (see SOURCES.md). Where a reference library's *policy* differs from
ours the case is still tested, against our documented answer, in the ``*_POLICY`` tables below.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloom_frontier.canonical import InvalidURL, canonicalize, resolve_link
from bloom_frontier.canonical.structural import MAX_URL_LENGTH, remove_dot_segments

DATA = Path(__file__).parent / "data"
#: Properties, not timings: a loaded CI machine must not fail them on hypothesis' deadline.
no_deadline = settings(deadline=None)


def load(name: str) -> list:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def outcome(url: str) -> str:
    """The key, or ``InvalidURL:<reason>``: lets a table hold either."""
    try:
        return canonicalize(url)
    except InvalidURL as error:
        return f"InvalidURL:{error.reason}"


# --- RFC 3986 §5.2.4 and §6.2 -------------------------------------------------------------------

RFC_NORMALIZATION = load("rfc3986_normalization.json")


def as_http(url: str) -> str:
    """RFC examples use other schemes; we only accept http(s), so test the same URL as http."""
    return "http" + url[url.index(":") :]


@pytest.mark.parametrize(
    "case", [c for c in RFC_NORMALIZATION if c["kind"] == "remove_dot_segments"]
)
def test_rfc3986_remove_dot_segments(case: dict) -> None:
    assert remove_dot_segments(case["input"]) == case["expected"]


@pytest.mark.parametrize("case", [c for c in RFC_NORMALIZATION if c["kind"] == "equivalent"])
def test_rfc3986_equivalent_urls_share_a_key(case: dict) -> None:
    a, b = case["a"], case["b"]
    if a.lower().startswith("http"):
        assert canonicalize(a) == canonicalize(b)
    else:  # example: and mailto: are refused, their http twins normalize alike
        assert outcome(a) == outcome(b) == "InvalidURL:unsupported-scheme"
        if "//" in a:
            assert canonicalize(as_http(a)) == canonicalize(as_http(b)) == as_http(a)


@pytest.mark.parametrize("case", [c for c in RFC_NORMALIZATION if c["kind"] == "equivalent_set"])
def test_rfc3986_normal_form_for_http(case: dict) -> None:
    for member in case["members"]:
        assert canonicalize(member) == case["normal_form"]


def test_rfc3986_bare_question_mark_policy() -> None:
    """RFC 3986 §6.2.3 keeps ``/?`` apart from ``/``; our documented policy drops the bare ``?``."""
    (case,) = [c for c in RFC_NORMALIZATION if c["kind"] == "not_equivalent"]
    assert canonicalize(case["a"]) == canonicalize(case["b"]) == "http://example.com/"


def test_rfc3986_trailing_slash_is_not_structural() -> None:
    """§6.2.4: ``/data`` vs ``/data/`` is only known from a redirect, not from syntax."""
    (case,) = [c for c in RFC_NORMALIZATION if c["kind"] == "protocol_based_equivalent"]
    assert canonicalize(case["a"]) != canonicalize(case["b"])


# --- hosts: WHATWG toascii.json -------------------------------------------------------------------

TOASCII = [case for case in load("whatwg_toascii.json") if isinstance(case, dict)]
#: WHATWG accepts these; we fail closed because no DNS resolver could ever look them up
#: (empty label, label over 63 or name over 253 octets) or the xn-- label is not Punycode.
TOASCII_STRICTER = {
    "x..xn--zca": "empty label",
    "x..ß": "empty label",
    "xn--ls8h=": "not Punycode",
    "xn--0.com": "not Punycode",
}


def toascii_is_stricter(host: str) -> bool:
    labels = host.rstrip(".").split(".")
    return host in TOASCII_STRICTER or len(host) > 253 or any(len(label) > 63 for label in labels)


@pytest.mark.parametrize("case", TOASCII, ids=lambda case: repr(case["input"]))
def test_whatwg_toascii(case: dict) -> None:
    url = f"https://{case['input']}/x"
    if case["output"] is None or toascii_is_stricter(case["input"]):
        with pytest.raises(InvalidURL) as error:
            canonicalize(url)
        assert error.value.reason == "bad-host"
    else:
        assert canonicalize(url) == f"https://{case['output']}/x"


HOSTS = [
    ("http://WWW.Example.COM/", "http://www.example.com/"),
    ("http://www.example.com./", "http://www.example.com./"),  # root dot kept, as WHATWG
    ("http://ex%61mple.com/", "http://example.com/"),
    ("http://Bücher.example/", "http://xn--bcher-kva.example/"),
    ("http://xn--BCHER-kva.example/", "http://xn--bcher-kva.example/"),
    ("http://例え。テスト/", "http://xn--r8jz45g.xn--zckzah/"),  # ideographic full stop
    ("http://under_score.example.com/", "http://under_score.example.com/"),
    ("http://2130706433/", "http://127.0.0.1/"),
    ("http://0x7f.1/", "http://127.0.0.1/"),
    ("http://0177.0.0.1/", "http://127.0.0.1/"),
    ("http://0x" + "0" * 40 + "7f.1/", "http://127.0.0.1/"),
    ("http://127.1/", "http://127.0.0.1/"),
    ("http://192.168.257/", "http://192.168.1.1/"),
    ("http://1.2.3.4./", "http://1.2.3.4/"),
    ("http://[2001:DB8:0:0:0:0:0:1]/", "http://[2001:db8::1]/"),
    ("http://[::FFFF:1.2.3.4]:8080/", "http://[::ffff:102:304]:8080/"),
]

BAD_HOSTS = [
    "http:///path",
    "http://:80/",
    "http://user@/",
    "http://exa mple.com/",
    "http://exa%20mple.com/",
    "http://a<b/",
    "http://%zz.com/",
    "http://%ff.com/",  # not UTF-8
    "http://xn--a.ß/",
    "http://xn--tešla/",
    "http://xn--1ug.ß/",  # U+200D behind Punycode, checked because the domain is not ASCII
    "http://\u200d.example/",
    "http://\U000e0001.com/",
    "http://a..b/",
    "http://" + "a" * 64 + ".com/",
    "http://" + "a." * 127 + "com/",
    "http://256.0.0.1/",
    "http://4294967296/",
    "http://1.2.3.4.5/",
    "http://foo.09/",
    "http://" + "1" * 5000 + "/",  # more digits than int() converts
    "http://1." + "0x" + "f" * 5000 + "/",
    "http://[::1/",
    "http://[1::2::3]/",
    "http://[fe80::1%25eth0]/",
    "http://[v1.abc]/",
    "http://[::1]x/",
]


@pytest.mark.parametrize(("url", "expected"), HOSTS)
def test_host_normalization(url: str, expected: str) -> None:
    assert canonicalize(url) == expected


@pytest.mark.parametrize("url", BAD_HOSTS)
def test_bad_hosts_fail_closed(url: str) -> None:
    with pytest.raises(InvalidURL) as error:
        canonicalize(url)
    assert error.value.reason == "bad-host"


# --- everything else ------------------------------------------------------------------------------

STRUCTURE = [
    # scheme, ports
    ("HTTPS://example.com:443/", "https://example.com/"),
    ("https://example.com:80/", "https://example.com:80/"),
    ("http://example.com:0080/", "http://example.com/"),
    ("http://example.com:" + "0" * 30 + "8080/", "http://example.com:8080/"),
    ("http://example.com:/", "http://example.com/"),
    ("http://example.com:65535/", "http://example.com:65535/"),
    # userinfo
    ("http://User:Pa%73s@example.com/", "http://User:Pass@example.com/"),
    ("http://:@example.com/", "http://example.com/"),
    ("http://user:@example.com/", "http://user@example.com/"),
    ("http://a@b@example.com/", "http://a%40b@example.com/"),
    ("http://u:p:w@example.com/", "http://u:p%3Aw@example.com/"),  # first ":" splits
    # path: dot segments (also when percent-encoded), escapes, raw characters
    ("http://example.com", "http://example.com/"),
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/../../a", "http://example.com/a"),
    ("http://example.com/a/%2e%2E/b", "http://example.com/b"),
    ("http://example.com/a/b/..", "http://example.com/a/"),
    ("http://example.com/../", "http://example.com/"),
    ("http://example.com/a/..", "http://example.com/"),
    ("http://example.com/a//../b", "http://example.com/a/b"),
    ("http://example.com/%7euser/%41%5a%2d", "http://example.com/~user/AZ-"),
    ("http://example.com/a%2fb%3F%23%26%3d%2B", "http://example.com/a%2Fb%3F%23%26%3D%2B"),
    ("http://example.com/%e9t%C3%A9", "http://example.com/%E9t%C3%A9"),
    ("http://example.com/été", "http://example.com/%C3%A9t%C3%A9"),
    ("http://example.com/a b|c", "http://example.com/a%20b%7Cc"),
    ("http://example.com/100%", "http://example.com/100%25"),
    ("http://example.com/%g1%2", "http://example.com/%25g1%252"),
    ("http://example.com/a\\b", "http://example.com/a%5Cb"),
    ("http://example.com/Case/KEPT", "http://example.com/Case/KEPT"),
    ("http://example.com//double//slash", "http://example.com//double//slash"),
    ("http://example.com/;p=1,2:x@y!$'()*", "http://example.com/;p=1,2:x@y!$'()*"),
    # query: stable sort by key, nothing removed, + and reserved escapes untouched
    ("http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2"),
    ("http://example.com/?b=2&a=3&b=1&a=2", "http://example.com/?a=3&a=2&b=2&b=1"),
    ("http://example.com/?a=&a", "http://example.com/?a=&a"),
    ("http://example.com/?a&a=", "http://example.com/?a&a="),
    ("http://example.com/?&&b&&a&", "http://example.com/?a&b"),
    ("http://example.com/?&", "http://example.com/"),
    ("http://example.com/?q=a+b%20c", "http://example.com/?q=a+b%20c"),
    ("http://example.com/?q=%2b%26x%3D", "http://example.com/?q=%2B%26x%3D"),
    ("http://example.com/?q=%7E%61", "http://example.com/?q=~a"),
    ("http://example.com/?q=é ü", "http://example.com/?q=%C3%A9%20%C3%BC"),
    ("http://example.com/?u=http://x/?y", "http://example.com/?u=http://x/?y"),
    ("http://example.com/?q='x'", "http://example.com/?q=%27x%27"),  # as Scrapy sends it
    ("http://example.com/?a[]=1&a[]=2", "http://example.com/?a%5B%5D=1&a%5B%5D=2"),
    # fragment dropped, surrounding junk stripped, tab/newline removed
    ("http://example.com/a?b#c?d", "http://example.com/a?b"),
    ("http://example.com/#", "http://example.com/"),
    ("\x00 http://exa\tmple.com/a\r\nb \x1f", "http://example.com/ab"),
]


@pytest.mark.parametrize(("url", "expected"), STRUCTURE)
def test_structural_rules(url: str, expected: str) -> None:
    assert canonicalize(url) == expected


REJECTIONS = [
    ("ftp://example.com/", "unsupported-scheme"),
    ("javascript:alert(1)", "unsupported-scheme"),
    ("mailto:a@example.com", "unsupported-scheme"),
    ("//example.com/", "not-absolute"),
    ("/path", "not-absolute"),
    ("example.com", "not-absolute"),
    ("", "not-absolute"),
    ("http:example.com", "not-absolute"),
    ("http:/example.com", "not-absolute"),
    ("http://example.com:65536/", "bad-port"),
    ("http://example.com:-1/", "bad-port"),
    ("http://example.com:8O/", "bad-port"),
    ("http://example.com:\uff18\uff10/", "bad-port"),  # fullwidth digits are not a port
    ("http://example.com:80:80/", "bad-port"),
    ("http://example.com:" + "9" * 5000 + "/", "bad-port"),  # more digits than int() converts
    ("http://example.com/\ud800", "bad-url"),
    ("http://example.com/" + "a" * MAX_URL_LENGTH, "too-long"),
    ("http://example.com/" + "é" * (MAX_URL_LENGTH // 6), "too-long"),  # too long once encoded
]


@pytest.mark.parametrize(("url", "reason"), REJECTIONS)
def test_rejections_carry_a_reason(url: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as error:
        canonicalize(url)
    assert error.value.reason == reason


def test_length_limit_ignores_the_dropped_fragment() -> None:
    url = "http://example.com/" + "a" * 100
    assert canonicalize(url + "#" + "f" * MAX_URL_LENGTH) == url


def test_non_string_input_is_an_invalid_url() -> None:
    with pytest.raises(InvalidURL) as error:
        canonicalize(b"http://example.com/")  # type: ignore[arg-type]
    assert error.value.reason == "bad-url"


# --- reference libraries (policies differ; each difference is spelled out) -----------------------

#: w3lib.url.canonicalize_url cases where our policy differs: input -> (our key, why).
W3LIB_POLICY = {
    "http://www.example.com/do?c=3&b=5&b=2&a=50": (
        "http://www.example.com/do?a=50&b=5&b=2&c=3",
        "we sort by key only, so repeated keys keep their order",
    ),
    "http://www.example.com/do?b=&c&a=2": (
        "http://www.example.com/do?a=2&b=&c",
        "`c` and `c=` stay distinct",
    ),
    "http://www.example.com/do?1750,4": (
        "http://www.example.com/do?1750,4",
        "a parameter without `=` is left as written",
    ),
    "http://www.example.com/do?q=a space&a=1": (
        "http://www.example.com/do?a=1&q=a%20space",
        "space is %20 (RFC 3986); w3lib rewrites it as + (form encoding)",
    ),
    "http://www.example.com/do?q=a%20space&a=1": (
        "http://www.example.com/do?a=1&q=a%20space",
        "%20 is not turned into +",
    ),
    "http://www.example.com/do?price(£)=500&a=1": (
        "http://www.example.com/do?a=1&price(%C2%A3)=500",
        "sub-delims ( ) are legal in a query and kept raw",
    ),
    "https://example.com/a%23b%2cc#bash": (
        "https://example.com/a%23b%2Cc",
        "%2C is a reserved escape: never decoded",
    ),
    "http://.éxamplé.com/résumé?q=résumé": ("InvalidURL:bad-host", "empty label"),
    "http://www.éxamplééxamplééxamplééxamplééxamplééxamplééxamplééxamplééxamplééxamplééxamplé"
    ".com/résumé?q=résumé": ("InvalidURL:bad-host", "label longer than 63 octets"),
}

#: url-normalize cases where our policy differs: input -> (our key, why).
URL_NORMALIZE_POLICY = {
    "http://example.com/?b&a": ("http://example.com/?a&b", "we sort query parameters"),
    "http://example.com/?q=%C7": ("http://example.com/?q=%C7", "bytes are never rewritten"),
    "http://example.com/?q=C%CC%A7": (
        "http://example.com/?q=C%CC%A7",
        "no Unicode normalization of decoded data",
    ),
    "http://example.com/#!5753509/hello-world": (
        "http://example.com/",
        "fragments are dropped, no _escaped_fragment_",
    ),
    "http://www.example.com./": ("http://www.example.com./", "root dot kept (WHATWG)"),
    "http://www.foo.com.:81/foo": ("http://www.foo.com.:81/foo", "root dot kept (WHATWG)"),
    "http://www.foo.com./foo/bar.html": (
        "http://www.foo.com./foo/bar.html",
        "root dot kept (WHATWG)",
    ),
    "https://docs.google.com/spreadsheets/d/abcd/edit#gid=1234": (
        "https://docs.google.com/spreadsheets/d/abcd/edit",
        "fragments are dropped",
    ),
    "https://faß.de/über?q=Ç#пример": (
        "https://xn--fa-hia.de/%C3%BCber?q=%C3%87",
        "fragments are dropped",
    ),
    "https://example.com/?q=%23test&where=code=123": (
        "https://example.com/?q=%23test&where=code=123",
        "= inside a value is legal and kept raw",
    ),
    "http:example.com": ("InvalidURL:not-absolute", "no //authority (resolve_link handles it)"),
    "http:example.com/path": ("InvalidURL:not-absolute", "no //authority"),
    "https:www.example.com": ("InvalidURL:not-absolute", "no //authority"),
}


def refusal(url: str) -> str | None:
    """What we answer for a reference case that is not an absolute http(s) URL."""
    scheme = re.match(r"\s*([A-Za-z][A-Za-z0-9+.\-]*):", url)
    if scheme is None:
        return "InvalidURL:not-absolute"
    if scheme.group(1).lower() not in ("http", "https"):
        return "InvalidURL:unsupported-scheme"
    return None


def our_answer(case: dict, policy: dict[str, tuple[str, str]]) -> str:
    url = case["input"]
    if url in policy:
        return policy[url][0]
    return refusal(url) or case["expected"]


def reference_cases(name: str, policy: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """(input, what we answer) for every default-argument case of a reference library."""
    return [
        (case["input"], our_answer(case, policy))
        for case in load(name)
        if not case.get("kwargs")  # the library's non-default options are not our policy
    ]


@pytest.mark.parametrize(
    ("url", "expected"), reference_cases("w3lib_canonicalize.json", W3LIB_POLICY)
)
def test_w3lib_reference_cases(url: str, expected: str) -> None:
    assert outcome(url) == expected


@pytest.mark.parametrize(
    ("url", "expected"), reference_cases("url_normalize.json", URL_NORMALIZE_POLICY)
)
def test_url_normalize_reference_cases(url: str, expected: str) -> None:
    assert outcome(url) == expected


# --- every WHATWG parser input: only InvalidURL, and the browser's URL gets the same key ---------

URLTESTDATA = [case for case in load("whatwg_urltestdata.json") if isinstance(case, dict)]
#: Inputs WHATWG accepts where we answer otherwise: input -> (our outcome, why).
URLTESTDATA_DIVERGENT = {
    "": ("junk", "an empty href is junk to resolve_link, not a link to the page itself"),
    "  \t": ("junk", "a blank href is junk"),
    "http://./": ("InvalidURL:bad-host", "empty labels"),
    "http://../": ("InvalidURL:bad-host", "empty labels"),
    "http://foo.09..": ("InvalidURL:bad-host", "empty label"),
    "https://xn--/": ("InvalidURL:bad-host", "empty Punycode label"),
}


def fetch_url(case: dict) -> str | None:
    """What the spider would fetch for this input (an absolute input is its own base)."""
    return resolve_link(case.get("base") or case["input"], case["input"])


def fetch_then_key(case: dict) -> str:
    url = fetch_url(case)
    return "junk" if url is None else outcome(url)


@pytest.mark.parametrize("case", URLTESTDATA, ids=lambda case: repr(case["input"])[:60])
def test_whatwg_inputs_only_raise_invalid_url_and_keys_are_stable(case: dict) -> None:
    for url in (case["input"], fetch_url(case)):
        if url is None:
            continue
        key = outcome(url)
        if not key.startswith("InvalidURL:"):
            assert canonicalize(key) == key


@pytest.mark.parametrize(
    "case",
    [c for c in URLTESTDATA if not c.get("failure") and c.get("protocol") in ("http:", "https:")],
    ids=lambda case: repr(case["input"])[:60],
)
def test_whatwg_valid_http_urls_key_like_the_browser_url(case: dict) -> None:
    if case["input"] in URLTESTDATA_DIVERGENT:
        assert fetch_then_key(case) == URLTESTDATA_DIVERGENT[case["input"]][0]
    else:
        assert fetch_then_key(case) == outcome(case["href"])
        assert not outcome(case["href"]).startswith("InvalidURL:")


@pytest.mark.parametrize(
    "case", [c for c in URLTESTDATA if c.get("failure")], ids=lambda case: repr(case["input"])[:60]
)
def test_whatwg_invalid_urls_never_get_an_http_key(case: dict) -> None:
    """What the browser cannot parse is junk or a rejection, never a key."""
    key = fetch_then_key(case)
    assert key == "junk" or key.startswith("InvalidURL:")


# --- properties -----------------------------------------------------------------------------------

URL_ALPHABET = st.sampled_from([*"aZ09-._~%2fE/?#&=+;:@[]!$'() \t\\é€😀", "%2e", "%7E", ".."])
url_parts = st.lists(URL_ALPHABET, max_size=30).map("".join)
hosts = st.sampled_from(
    ["example.com", "EXAMPLE.com.", "Bücher.de", "127.1", "0x7f.0.0.1", "[::1]", "a_b", "xn--zca"]
)
urls = st.builds(
    "{}://{}{}{}/{}".format,
    st.sampled_from(["http", "HTTP", "https", "hTTps"]),
    st.sampled_from(["", "user@", "u:p@", ":@", "a@b@"]),
    hosts,
    st.sampled_from(["", ":", ":80", ":443", ":8080", ":0"]),
    url_parts,
)


@no_deadline
@given(urls)
def test_canonicalize_is_idempotent(url: str) -> None:
    key = outcome(url)
    if not key.startswith("InvalidURL:"):
        assert canonicalize(key) == key


@no_deadline
@given(st.text())
def test_arbitrary_text_raises_only_invalid_url(text: str) -> None:
    for url in (text, "http://" + text, "https://example.com/" + text):
        key = outcome(url)
        if not key.startswith("InvalidURL:"):
            assert canonicalize(key) == key
            assert key.isascii()
