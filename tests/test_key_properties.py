"""Properties of the dedupe key, checked on generated URLs (hypothesis).

Hosts are generic ones no provider claims, so the key is the rules-applied stage-1 form.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloom_frontier.canonical import RULES_VERSION, InvalidURL, canonicalize, dedupe_key
from bloom_frontier.canonical.rules import DEFAULT_RULES
from bloom_frontier.canonical.tracking import (
    GLOBAL_TRACKING,
    GLOBAL_TRACKING_PREFIXES,
    SHAPED_TRACKING,
)

WHATWG_TESTS = json.loads(
    (Path(__file__).parent / "data" / "whatwg_urltestdata.json").read_text("utf-8")
)

#: Timing is for bench/; a loaded CI machine must not turn a slow example into a failure.
NO_DEADLINE = settings(deadline=None)

HOSTS = st.sampled_from(
    [
        "example.com",
        "www.example.org",
        "shop.example.net",
        "127.0.0.1",
        "xn--bcher-kva.example",
        "[2001:db8::1]",
    ]
)
UNRESERVED = string.ascii_letters + string.digits + "-._~"
SEGMENT = st.text(UNRESERVED, min_size=1, max_size=8).filter(lambda s: s not in {".", ".."})
PATH = st.lists(SEGMENT, max_size=4).map(lambda segments: "/" + "/".join(segments))
# Kept names; a shaped name (si) is kept with these short values, never a tracker's token.
NAME = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=10).filter(
    lambda name: DEFAULT_RULES.drop_reason(name, "", None) is None
)
VALUE = st.text(UNRESERVED, max_size=8)
PARAMS = st.lists(st.tuples(NAME, VALUE), max_size=5, unique_by=lambda param: param[0])


def random_case(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.swapcase() if flip else c for c, flip in zip(text, flips, strict=True))


B64URL = string.ascii_letters + string.digits + "-_"
#: Values in a shaped tracker's format (tracking.SHAPED_TRACKING), raw or percent-encoded.
SHAPED_VALUES = {
    "si": st.text(B64URL, min_size=16, max_size=16),
    "ref_src": st.builds(
        str.__add__,
        st.sampled_from(["twsrc%5E", "twsrc%5e", "twsrc^"]),
        st.text(UNRESERVED + "%^|", max_size=20),
    ),
}
assert set(SHAPED_VALUES) == {shape.name for shape in SHAPED_TRACKING}


@st.composite
def shaped_param(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(SHAPED_VALUES)))
    return f"{random_case(draw, name)}={draw(SHAPED_VALUES[name])}"


@st.composite
def tracking_params(draw: st.DrawFn) -> list[str]:
    """Global tracking parameters in any letter case, with values needing escapes or not, and
    shaped ones with a tracker's value."""
    shaped = draw(st.lists(shaped_param(), max_size=2))
    names = draw(
        st.lists(
            st.one_of(
                st.sampled_from(sorted(GLOBAL_TRACKING)),
                st.builds(
                    str.__add__,
                    st.sampled_from(GLOBAL_TRACKING_PREFIXES),
                    st.text(string.ascii_lowercase + "_", max_size=8),
                ),
            ),
            min_size=1,
            max_size=4,
        )
    )
    values = st.text(UNRESERVED + "%/:@ éü", max_size=10)
    return [f"{random_case(draw, name)}={draw(values)}" for name in names] + shaped


def build(scheme: str, host: str, path: str, params: list[str], fragment: str = "") -> str:
    query = "?" + "&".join(params) if params else ""
    return f"{scheme}://{host}{path}{query}{fragment}"


def encode(params: list[tuple[str, str]]) -> list[str]:
    return [f"{name}={value}" for name, value in params]


SCHEMES = st.sampled_from(["http", "https"])


@NO_DEADLINE
@given(scheme=SCHEMES, host=HOSTS, path=PATH, params=PARAMS, extra=tracking_params())
def test_key_of_canonical_form_is_the_key(scheme, host, path, params, extra) -> None:
    url = build(scheme, host, path.replace("/", "//", 1) + "/./x/..", encode(params) + extra)
    assert dedupe_key(canonicalize(url)) == dedupe_key(url)


@NO_DEADLINE
@given(text=st.text(max_size=60))
def test_key_of_canonical_form_is_the_key_on_any_text(text: str) -> None:
    for url in (text, "http://example.com/" + text, "https://" + text):
        try:
            canonical = canonicalize(url)
        except InvalidURL:
            with pytest.raises(InvalidURL):
                dedupe_key(url)
            continue
        assert dedupe_key(canonical) == dedupe_key(url)


@NO_DEADLINE
@given(scheme=SCHEMES, host=HOSTS, path=PATH, params=PARAMS, data=st.data())
def test_parameter_order_never_changes_the_key(scheme, host, path, params, data) -> None:
    shuffled = data.draw(st.permutations(params))
    assert dedupe_key(build(scheme, host, path, encode(shuffled))) == dedupe_key(
        build(scheme, host, path, encode(params))
    )


@NO_DEADLINE
@given(
    scheme=SCHEMES,
    host=HOSTS,
    path=PATH,
    params=PARAMS,
    extra=tracking_params(),
    fragment=st.one_of(st.just(""), st.text(max_size=10).map(lambda f: "#" + f)),
    data=st.data(),
)
def test_tracking_params_and_fragments_never_change_the_key(
    scheme, host, path, params, extra, fragment, data
) -> None:
    mixed = encode(params)
    for param in extra:
        mixed.insert(data.draw(st.integers(0, len(mixed))), param)
    assert dedupe_key(build(scheme, host, path, mixed, fragment)) == dedupe_key(
        build(scheme, host, path, encode(params))
    )


@NO_DEADLINE
@given(
    scheme=SCHEMES,
    host=HOSTS,
    path=PATH,
    params=PARAMS,
    name=st.sampled_from(sorted(SHAPED_VALUES)),
    value=st.text(UNRESERVED + "%^|+", max_size=40),
)
def test_shaped_names_are_kept_without_the_trackers_shape(
    scheme, host, path, params, name, value
) -> None:
    shape = next(shape.value for shape in SHAPED_TRACKING if shape.name == name)
    url = build(scheme, host, path, [*encode(params), f"{name}={value}"])
    canonical = canonicalize(url)
    pairs = [param.partition("=") for param in canonical.partition("?")[2].split("&")]
    if any(key == name and shape.fullmatch(value) for key, _, value in pairs):
        return  # drawn in the tracker's shape after all: the other tests cover it
    assert dedupe_key(url) == f"{RULES_VERSION}|{canonical}"


@NO_DEADLINE
@given(scheme=SCHEMES, host=HOSTS, path=PATH, params=PARAMS.filter(bool), data=st.data())
def test_changing_a_kept_parameter_value_changes_the_key(scheme, host, path, params, data) -> None:
    index = data.draw(st.integers(0, len(params) - 1))
    name, value = params[index]
    new_value = data.draw(VALUE.filter(lambda v: v != value))
    changed = [*params[:index], (name, new_value), *params[index + 1 :]]
    assert dedupe_key(build(scheme, host, path, encode(changed))) != dedupe_key(
        build(scheme, host, path, encode(params))
    )


@NO_DEADLINE
@given(scheme=SCHEMES, host=HOSTS, path=PATH, params=PARAMS, data=st.data())
def test_changing_path_case_changes_the_key(scheme, host, path, params, data) -> None:
    other = random_case(data.draw, path)
    if other == path:
        return  # no letter flipped: nothing to compare
    assert dedupe_key(build(scheme, host, other, encode(params))) != dedupe_key(
        build(scheme, host, path, encode(params))
    )


@NO_DEADLINE
@given(scheme=SCHEMES, host=HOSTS, path=PATH.filter(lambda p: not p.endswith("/")), params=PARAMS)
def test_a_trailing_slash_changes_the_key(scheme, host, path, params) -> None:
    assert dedupe_key(build(scheme, host, path + "/", encode(params))) != dedupe_key(
        build(scheme, host, path, encode(params))
    )


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), st.text().map(lambda t: "http://" + t)))
def test_only_invalid_url_is_ever_raised(text: str) -> None:
    try:
        key = dedupe_key(text)
    except InvalidURL as error:
        assert error.reason
    else:
        assert key.startswith(DEFAULT_RULES.version + "|")


@pytest.mark.parametrize(
    "url",
    sorted(
        {
            value
            for test in WHATWG_TESTS
            if isinstance(test, dict)
            for value in (test.get("input"), test.get("base"), test.get("href"))
            if isinstance(value, str)
        }
    ),
)
def test_whatwg_inputs_give_a_key_or_invalid_url(url: str) -> None:
    try:
        key = dedupe_key(url)
    except InvalidURL as error:
        assert error.reason
    else:
        assert key.startswith(DEFAULT_RULES.version + "|")
        rest = key.partition("|")[2]
        if rest.startswith(("http://", "https://")):  # not a provider identity
            assert dedupe_key(rest) == key  # a key's URL is its own key


@NO_DEADLINE
@given(scheme=SCHEMES, host=HOSTS, path=PATH, params=PARAMS, extra=tracking_params())
def test_a_keys_url_is_its_own_key(scheme, host, path, params, extra) -> None:
    raw_path = path.replace("/", "//", 1) + ";JSESSIONID=0A1B"
    key = dedupe_key(build(scheme, host, raw_path, encode(params) + extra))
    assert dedupe_key(key.partition("|")[2]) == key
