"""Stage 2 (bloom_frontier.canonical.rules): each rule, what is never touched, per-host rules,
versions."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from bloom_frontier.canonical import RULES_VERSION, InvalidURL, canonicalize, dedupe_key, explain
from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet, rules_from_settings
from bloom_frontier.canonical.tracking import GLOBAL_TRACKING, SESSION_PARAMS


def key_url(key: str) -> str:
    """The part of a key after its version prefix."""
    version, _, rest = key.partition("|")
    assert version == RULES_VERSION
    return rest


# (input, expected key without version, rules that fired)
REMOVALS = [
    # global tracking parameters, any case, any position
    (
        "https://example.com/a?utm_source=x&b=1",
        "https://example.com/a?b=1",
        ["tracking:utm_source"],
    ),
    (
        "https://example.com/a?UTM_Campaign=x&utm_medium=y",
        "https://example.com/a",
        ["tracking:utm_campaign", "tracking:utm_medium"],
    ),
    ("https://example.com/a?mtm_kwd=x&p=2", "https://example.com/a?p=2", ["tracking:mtm_kwd"]),
    (
        "https://example.com/?fbclid=IwAR1&gclid=Cj0&q=x",
        "https://example.com/?q=x",
        ["tracking:fbclid", "tracking:gclid"],
    ),
    (
        "https://example.com/n?mc_cid=1&mc_eid=2&page=3",
        "https://example.com/n?page=3",
        ["tracking:mc_cid", "tracking:mc_eid"],
    ),
    ("https://example.com/a?hsCtaTracking=1", "https://example.com/a", ["tracking:hsctatracking"]),
    # per-provider tracking parameters, on the provider's hosts and subdomains only
    (
        "https://www.youtube.com/@channel/videos?si=9xQd1Kk2&feature=share",
        "https://www.youtube.com/@channel/videos",
        ["tracking:feature", "tracking:si"],
    ),
    (
        "https://twitter.com/jack/status/20?ref_src=twsrc%5Etfw&ref_url=x",
        "https://twitter.com/jack/status/20",
        ["tracking:ref_src", "tracking:ref_url"],
    ),
    (
        "https://x.com/jack/status/20?s=20&t=abc",
        "https://x.com/jack/status/20",
        ["tracking:s", "tracking:t"],
    ),
    (
        "https://mobile.twitter.com/jack?ref_src=twsrc%5Egoogle",
        "https://mobile.twitter.com/jack",
        ["tracking:ref_src"],
    ),
    (
        "https://www.instagram.com/p/Cx/?igsh=MWQ1",
        "https://www.instagram.com/p/Cx/",
        ["tracking:igsh"],
    ),
    (
        "https://open.spotify.com/track/4u?si=a1b2",
        "https://open.spotify.com/track/4u",
        ["tracking:si"],
    ),
    (
        "https://medium.com/@a/post-1?source=rss",
        "https://medium.com/@a/post-1",
        ["tracking:source"],
    ),
    # shaped tracking: generic names stripped on any host, only with a tracker's value shape
    (
        "https://example.com/a?ref_src=twsrc%5Etfw&b=1",
        "https://example.com/a?b=1",
        ["tracking-shaped:ref_src"],
    ),
    (
        "https://blog.example.org/p?ref_src=twsrc%5egoogle%7Ctwcamp%5Eserp%7Ctwgr%5Eauthor",
        "https://blog.example.org/p",
        ["tracking-shaped:ref_src"],
    ),
    (
        "https://example.com/a?ref_src=twsrc^tfw",
        "https://example.com/a",
        ["tracking-shaped:ref_src"],
    ),
    (
        "https://example.com/v?SI=AbCdEfGh-_jKl09z&id=3",
        "https://example.com/v?id=3",
        ["tracking-shaped:si"],
    ),
    (
        "https://player.example.net/t/4u?si=4472348a63dd4f83",
        "https://player.example.net/t/4u",
        ["tracking-shaped:si"],
    ),
    # on a provider's host the name list fires first, whatever the value
    (
        "https://www.youtube.com/@c?si=AbCdEfGh-_jKl09z",
        "https://www.youtube.com/@c",
        ["tracking:si"],
    ),
    # session ids
    (
        "https://example.com/shop/item.jsp;jsessionid=0A1B2C3D?id=7",
        "https://example.com/shop/item.jsp?id=7",
        ["session:jsessionid"],
    ),
    (
        "https://example.com/a;JSESSIONID=0A1B;v=2/b",
        "https://example.com/a;v=2/b",
        ["session:jsessionid"],
    ),
    ("https://example.com/a?PHPSESSID=f00&b=1", "https://example.com/a?b=1", ["session:phpsessid"]),
    (
        "https://example.com/a?ASPSESSIONIDQQGGQGPA=KDJF&b=1",
        "https://example.com/a?b=1",
        ["session:aspsessionid"],
    ),
    (
        "https://example.com/a?jsessionid=1&CFID=2&CFTOKEN=3",
        "https://example.com/a",
        ["session:cfid", "session:cftoken", "session:jsessionid"],
    ),
    # runs of slashes
    ("https://example.com//library//os.html", "https://example.com/library/os.html", ["slashes"]),
    ("https://example.com/a///b/", "https://example.com/a/b/", ["slashes"]),
    # allowlists
    (
        "https://news.ycombinator.com/item?id=8863&utm_source=x&goto=news",
        "https://news.ycombinator.com/item?id=8863",
        ["allowlist:news.ycombinator.com/item"],
    ),
    (
        "https://play.google.com/store/apps/details?id=org.mozilla.firefox&hl=de&referrer=x",
        "https://play.google.com/store/apps/details?hl=de&id=org.mozilla.firefox",
        ["allowlist:play.google.com/store/apps/details"],
    ),
]


@pytest.mark.parametrize(("url", "expected", "fired"), REMOVALS)
def test_rule_removes(url: str, expected: str, fired: list[str]) -> None:
    explanation = explain(url)
    assert key_url(explanation.key) == expected
    assert sorted(explanation.rules_fired) == sorted(fired)
    assert explanation.identity is None
    assert explanation.canonical == canonicalize(url)
    assert dedupe_key(url) == explanation.key


@pytest.mark.parametrize("name", sorted(GLOBAL_TRACKING))
def test_every_global_tracking_name_is_removed(name: str) -> None:
    assert key_url(dedupe_key(f"https://example.com/p?{name}=v&keep=1")) == (
        "https://example.com/p?keep=1"
    )


@pytest.mark.parametrize("name", sorted(SESSION_PARAMS))
def test_every_session_name_is_removed(name: str) -> None:
    assert key_url(dedupe_key(f"https://example.com/p?{name.upper()}=v")) == "https://example.com/p"


# URLs the rules leave exactly as stage 1 made them.
UNTOUCHED = [
    # generic words and other providers' share tokens are not global
    "https://example.com/a?ref=home",
    "https://example.com/a?source=feed",
    "https://example.com/a?id=3&s=2&t=1",
    "https://example.com/a?si=9xQd1Kk2",
    # shaped names whose value lacks the tracker's shape are content
    "https://example.com/a?si=2",
    "https://example.com/a?si=en",
    "https://example.com/a?si=AbCdEfGh-_jKl09",  # 15 characters
    "https://example.com/a?si=AbCdEfGh-_jKl09zz",  # 17
    "https://example.com/a?si=AbCdEfGh.-jKl09z",  # 16, with a character outside base64url
    "https://example.com/a?si=AbCdEfGh+-jKl09z",  # 16, with base64's "+"
    "https://example.com/a?si=0123456789abcdef0123456789abcdef",  # 32 hex: not stripped
    "https://example.com/a?ref_src=homepage",
    "https://example.com/a?ref_src=twsrc",
    "https://example.com/a?ref_src=xtwsrc%5Etfw",
    "https://example.com/a?src=twsrc%5Etfw&sid=AbCdEfGh-_jKl09z",
    "https://example.com/a?igsh=MWQ1",
    "https://example.com/forum/viewtopic.php?sid=0123abcd&t=5",
    "https://example.com/a?sessionid=5",
    "https://example.com/notutm_source?utmsource=x&my_utm_source=y",
    # a HN page without an allowlist keeps its parameters
    "https://news.ycombinator.com/news?p=2",
    # values are never looked at, a lone ;param is not a session
    "https://example.com/a?q=utm_source%3Dx",
    "https://example.com/a?q=gclid&r=utm_x&s=si",
    "https://example.com/a;v=2",
    # an encoded slash is not a slash run
    "https://example.com/a/%2F/b",
]


@pytest.mark.parametrize("url", UNTOUCHED)
def test_rules_leave_untouched(url: str) -> None:
    explanation = explain(url)
    assert explanation.rules_fired == ()
    assert key_url(explanation.key) == canonicalize(url)


# Pairs that must keep different keys: trailing slash, path case, values, allowlisted names.
DISTINCT = [
    ("https://example.com/docs/", "https://example.com/docs"),
    ("https://example.com/Docs", "https://example.com/docs"),
    ("https://example.com/a?b=Value", "https://example.com/a?b=value"),
    ("https://example.com/a?b=1", "https://example.com/a?b=2"),
    ("https://example.com/a?b", "https://example.com/a?b="),
    ("https://example.com/a?b=1&b=2", "https://example.com/a?b=2&b=1"),
    ("https://example.com/a?utm_source=x", "https://example.com/a?utm_source=x&p=2"),
    ("https://example.com/a//", "https://example.com/a"),
    ("https://example.com/a", "https://example.org/a"),
    ("http://example.com/a", "https://example.com/a"),
    ("https://news.ycombinator.com/item?id=1", "https://news.ycombinator.com/item?ID=1"),
    ("https://news.ycombinator.com/item?id=1", "https://news.ycombinator.com/item?id=2"),
    ("https://www.youtube.com/watch?v=kJQP7kiw5Fk", "https://www.youtube.com/watch?v=kjqp7kiw5fk"),
]


@pytest.mark.parametrize(("first", "second"), DISTINCT)
def test_keys_stay_distinct(first: str, second: str) -> None:
    assert dedupe_key(first) != dedupe_key(second)


YOUTUBE_SEEDS = [
    "https://www.youtube.com/watch?v=kJQP7kiw5Fk&list=RDkJQP7kiw5Fk",
    "https://m.youtube.com/watch?v=kJQP7kiw5Fk",
    "https://youtu.be/kJQP7kiw5Fk?t=42&si=9xQd1Kk2",
    "https://www.youtube.com/watch?app=desktop&feature=share&v=kJQP7kiw5Fk",
]


def test_youtube_variants_share_the_identity_key() -> None:
    explanations = [explain(url) for url in YOUTUBE_SEEDS]
    assert {e.key for e in explanations} == {f"{RULES_VERSION}|youtube:kJQP7kiw5Fk"}
    for explanation in explanations:
        assert explanation.identity is not None
        assert explanation.identity.key == "youtube:kJQP7kiw5Fk"
        assert explanation.rules_fired[-1] == "identity:youtube"
    assert explanations[0].rules_fired == ("identity:youtube",)
    assert explanations[2].rules_fired == ("tracking:si", "identity:youtube")


def test_identity_is_read_after_the_rules() -> None:
    explanation = explain("https://www.youtube.com//watch;jsessionid=A1?v=kJQP7kiw5Fk")
    assert explanation.key == f"{RULES_VERSION}|youtube:kJQP7kiw5Fk"
    assert explanation.rules_fired == ("session:jsessionid", "slashes", "identity:youtube")


def test_variants_of_one_page_share_a_key() -> None:
    variants = [
        "https://example.com/library/os.html",
        "HTTPS://EXAMPLE.COM:443/library/os.html#top",
        "https://example.com/library/./x/../os.html?utm_source=rss&utm_medium=rss",
        "https://example.com/library//os.html;jsessionid=0A1B2C",
        "https://example.com/%6Cibrary/os.html?fbclid=IwAR2&gclid=x",
    ]
    assert len({dedupe_key(url) for url in variants}) == 1


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("javascript:alert(1)", "unsupported-scheme"),
        ("/relative/path", "not-absolute"),
        ("http://exa mple.com/", "bad-host"),
        ("http://example.com:99999/", "bad-port"),
    ],
)
def test_invalid_urls_raise_invalid_url(url: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as error:
        dedupe_key(url)
    assert error.value.reason == reason
    with pytest.raises(InvalidURL):
        explain(url)


# --- per-host customization --------------------------------------------------------------


def custom(host_rules: dict) -> RuleSet:
    return DEFAULT_RULES.with_host_rules(host_rules)


def test_host_strip_applies_to_host_and_subdomains_only() -> None:
    rules = custom({"example.com": {"strip": ["si", "Ref_Src"]}})
    url = "https://example.com/a?ref_src=twsrc%5Etfw&si=x&z=1"
    assert dedupe_key(url, rules).endswith("|https://example.com/a?z=1")
    assert dedupe_key("https://www.example.com/a?si=x", rules).endswith(
        "|https://www.example.com/a"
    )
    assert dedupe_key("https://example.org/a?si=x", rules).endswith("|https://example.org/a?si=x")
    assert dedupe_key("https://notexample.com/a?si=x", rules).endswith("?si=x")


def test_any_host_scope_applies_everywhere() -> None:
    rules = custom({"*": {"strip": ["si"]}})
    assert dedupe_key("https://example.org/a?si=x", rules).endswith("|https://example.org/a")
    assert dedupe_key("http://127.0.0.1/a?si=x", rules).endswith("|http://127.0.0.1/a")


@pytest.mark.parametrize(
    ("disable", "url", "expected"),
    [
        (["slashes"], "https://example.com/a//b", "https://example.com/a//b"),
        (
            ["tracking:utm_source"],
            "https://example.com/a?gclid=1&utm_medium=2&utm_source=3",
            "https://example.com/a?utm_source=3",
        ),
        (["tracking"], "https://example.com/a?gclid=1", "https://example.com/a?gclid=1"),
        (
            ["session"],
            "https://example.com/a;jsessionid=1?sid=2",
            "https://example.com/a;jsessionid=1?sid=2",
        ),
        (
            ["session:phpsessid"],
            "https://example.com/a;jsessionid=1?PHPSESSID=2",
            "https://example.com/a?PHPSESSID=2",
        ),
    ],
)
def test_host_can_switch_a_rule_off(disable: list[str], url: str, expected: str) -> None:
    rules = custom({"example.com": {"disable": disable}})
    assert dedupe_key(url, rules) == f"{rules.version}|{expected}"
    assert key_url(dedupe_key(url)) != expected  # the default rules do change it
    other = url.replace("example.com", "example.org")  # other hosts keep the default rules
    assert dedupe_key(other, rules).partition("|")[2] == key_url(dedupe_key(other))


SHAPED = "https://example.com/a?ref_src=twsrc%5Etfw&si=AbCdEfGh-_jKl09z"


@pytest.mark.parametrize(
    ("disable", "expected"),
    [
        (["tracking-shaped"], SHAPED),
        (["tracking-shaped:SI"], "https://example.com/a?si=AbCdEfGh-_jKl09z"),
        (["tracking-shaped:ref_src"], "https://example.com/a?ref_src=twsrc%5Etfw"),
        (["tracking"], "https://example.com/a"),  # a family of its own
    ],
)
def test_shaped_tracking_can_be_switched_off_per_host(disable: list[str], expected: str) -> None:
    rules = custom({"example.com": {"disable": disable}})
    assert dedupe_key(SHAPED, rules) == f"{rules.version}|{expected}"
    assert key_url(dedupe_key(SHAPED)) == "https://example.com/a"
    other = SHAPED.replace("example.com", "example.org")
    assert dedupe_key(other, rules) == f"{rules.version}|https://example.org/a"


def test_default_allowlist_and_provider_list_can_be_switched_off() -> None:
    rules = custom(
        {
            "news.ycombinator.com": {"disable": ["allowlist"]},
            "youtube.com": {"disable": ["tracking:si"]},
        }
    )
    hn = "https://news.ycombinator.com/item?goto=x&id=1"
    assert dedupe_key(hn, rules) == f"{rules.version}|{hn}"
    channel = "https://www.youtube.com/@c?feature=share&si=1"
    assert dedupe_key(channel, rules) == f"{rules.version}|https://www.youtube.com/@c?si=1"


def test_identity_can_be_switched_off_per_host() -> None:
    rules = custom({"youtu.be": {"disable": ["identity:youtube"]}})
    explanation = explain(YOUTUBE_SEEDS[2], rules)
    assert explanation.identity is None
    assert explanation.key == f"{rules.version}|https://youtu.be/kJQP7kiw5Fk?t=42"
    assert explanation.rules_fired == ("tracking:si",)
    assert dedupe_key(YOUTUBE_SEEDS[1], rules) == f"{rules.version}|youtube:kJQP7kiw5Fk"


def test_custom_allowlist_scoped_to_a_page_and_normalized() -> None:
    rules = custom({"Bücher.Example/Suche": {"keep_only": ["q", "page"]}})
    explanation = explain("https://www.bücher.example/Suche?q=rilke&page=2&view=grid", rules)
    assert explanation.key == (
        f"{rules.version}|https://www.xn--bcher-kva.example/Suche?page=2&q=rilke"
    )
    assert explanation.rules_fired == ("allowlist:xn--bcher-kva.example/Suche",)
    other_page = "https://www.xn--bcher-kva.example/suche?q=rilke&view=grid"
    assert dedupe_key(other_page, rules) == f"{rules.version}|{other_page}"


def test_disable_names_match_parameters_case_insensitively() -> None:
    rules = custom({"example.com": {"disable": ["tracking:UTM_Source", "session:PHPSESSID"]}})
    url = "https://example.com/a?PHPSESSID=1&utm_source=2"
    assert dedupe_key(url, rules) == f"{rules.version}|{url}"


def test_ipv6_host_scope() -> None:
    rules = custom({"[2001:DB8::1]": {"strip": ["si"]}})
    assert dedupe_key("http://[2001:db8::1]/a?si=1", rules).endswith("|http://[2001:db8::1]/a")


def test_most_specific_allowlist_wins() -> None:
    rules = custom({"example.com": {"keep_only": ["a"]}, "example.com/b": {"keep_only": ["b"]}})
    assert dedupe_key("https://example.com/b?a=1&b=2", rules).endswith("/b?b=2")
    assert dedupe_key("https://example.com/c?a=1&b=2", rules).endswith("/c?a=1")


def test_path_prefix_scope_applies_under_its_directory_only() -> None:
    rules = custom(
        {"example.com/docs/*": {"strip": ["from"]}, "example.com/docs/api/*": {"strip": ["v"]}}
    )
    assert dedupe_key("https://example.com/docs/a?from=1&v=2", rules).endswith("/docs/a?v=2")
    assert dedupe_key("https://example.com/docs/api/b?from=1&v=2", rules).endswith("/docs/api/b")
    for kept in ("https://example.com/docs?from=1", "https://example.com/shop/a?from=1"):
        assert dedupe_key(kept, rules) == f"{rules.version}|{kept}"


# --- versions ----------------------------------------------------------------------------


def test_default_keys_carry_the_rules_version() -> None:
    assert dedupe_key("https://example.com/") == f"{RULES_VERSION}|https://example.com/"


def test_customization_changes_the_version_of_every_key() -> None:
    rules = custom({"example.org": {"strip": ["si"]}})
    assert rules.version.startswith(f"{RULES_VERSION}+")
    # even a URL no custom rule touches gets a key distinct from the default one
    assert dedupe_key("https://example.com/", rules) != dedupe_key("https://example.com/")
    assert dedupe_key("https://example.com/", rules) == f"{rules.version}|https://example.com/"


def test_version_depends_on_what_the_customization_means_not_how_it_is_written() -> None:
    first = custom({"Example.ORG": {"strip": ["si", "ref_src"], "disable": ["slashes"]}})
    second = custom({"example.org": {"disable": ["slashes"], "strip": ["REF_SRC", "si"]}})
    assert first.version == second.version
    assert custom({"example.org": {"strip": ["si"]}}).version != first.version
    assert custom({}) is DEFAULT_RULES


def test_rules_from_settings() -> None:
    assert rules_from_settings(Settings()) is DEFAULT_RULES
    settings = Settings({"CANON_HOST_RULES": {"127.0.0.1": {"strip": ["si", "ref_src"]}}})
    rules = rules_from_settings(settings)
    assert rules.version != RULES_VERSION
    assert dedupe_key("http://127.0.0.1/a?si=1&ref_src=x", rules).endswith("|http://127.0.0.1/a")


@pytest.mark.parametrize(
    "host_rules",
    [
        {"example.com": {"remove": ["x"]}},
        {"example.com": {"disable": ["tracker"]}},
        {"example.com": {"strip": "si"}},
        {"example.com:8080": {"strip": ["si"]}},
        {"user@example.com": {"strip": ["si"]}},
        {"example.com/a?b=1": {"strip": ["si"]}},
        {"exa mple.com": {"strip": ["si"]}},
    ],
)
def test_bad_customization_is_rejected(host_rules: dict) -> None:
    with pytest.raises(ValueError):
        custom(host_rules)


def test_ruleset_version_cannot_break_the_key_format() -> None:
    with pytest.raises(ValueError):
        RuleSet(
            version=f"{RULES_VERSION}|x",
            tracking=frozenset(),
            tracking_prefixes=(),
            tracking_shapes={},
            session_params=frozenset(),
            session_prefixes=(),
            session_path_params=(),
            hosts={},
        )
