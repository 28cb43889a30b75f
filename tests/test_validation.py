"""Settings and URLs checked at start (issue 24, item 8): a value a setting of the defaults
table may not have ends ``scrapy crawl`` before the engine starts, and every command that
reads the settings without a crawler before it uses any, with one ``error:`` line naming the
setting, the value and what is allowed; exit status 2, no traceback (before: a traceback,
often followed by ``RuntimeError: Engine slot not assigned``, or a crawl that ran and
"finished" with a negative lease time). A URL's password is never shown, not even the first
characters of one holding an unencoded ``/``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from scrapy.settings import Settings

import bloom_frontier.defaults as defaults
from bloom_frontier.defaults import with_defaults
from bloom_frontier.validation import RULES, InvalidSetting, check_settings
from tests.httpserver import TestServer, html
from tests.redirect_server import scrapy

PASSWORD = "s3cret/pw"
#: A value no setting of the table may have: not a number, a flag, a choice, a list of
#: names, a key prefix, JSON or a URL.
NOTHING_VALID = "a b %(nope)s {"


def table() -> list[str]:
    return [name for name in dir(defaults) if name.isupper()]


def refused(*args: str, **env: str) -> str:
    """The one line a command that refuses its input prints, after checking it exits with
    status 2 and no traceback; the environment gives no REDIS_URL or STORE_URL of its own."""
    environment = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "STORE_URL"}}
    done = scrapy(*args, env={**environment, **env})
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: "), done.stderr[-3000:]
    assert done.returncode == 2
    return lines[0]


def test_every_setting_of_the_defaults_table_has_a_rule() -> None:
    """A setting added to crawler/defaults.py is checked at start too, once its rule is in
    crawler/validation.py (``RULES``)."""
    missing = sorted(set(table()) - set(RULES))
    assert not missing, f"settings of crawler/defaults.py without a rule in RULES: {missing}"
    assert sorted(set(RULES) - set(table())) == [], "rules for settings no longer in the table"


def test_every_default_is_allowed_by_its_rule() -> None:
    check_settings(with_defaults(Settings()))


@pytest.mark.parametrize("name", table())
def test_every_setting_refuses_a_value_it_cannot_have(name: str) -> None:
    settings = with_defaults(Settings())
    settings.set(name, NOTHING_VALID, "cmdline")
    with pytest.raises(InvalidSetting) as refusal:
        check_settings(settings)
    assert str(refusal.value).startswith(f"{name} ")
    assert repr(NOTHING_VALID) in str(refusal.value)


@pytest.mark.parametrize(
    ("setting", "allowed"),
    [
        ("FRONTIER_LEASE_TTL=abc", "must be a number above 0 (seconds), not 'abc'"),
        ("FRONTIER_LEASE_TTL=-1", "must be a number above 0 (seconds), not '-1'"),
        ("SEEN_FILTER_CAPACITY=abc", "must be an integer of at least 1 (keys), not 'abc'"),
        ("SEEN_FILTER_ERROR_RATE=2", "must be a number above 0 and below 1 (the false"),
        ("FRONTIER_PARTITIONS=0", "must be an integer from 1 to 1024, not '0'"),
        ("FRONTIER_MAX_REQUEST_BYTES=0", "must be an integer of at least 1024 (bytes), not '0'"),
        ("FRONTIER_KEY_PREFIX=%(nope)s", "must be text in which only %(spider)s is replaced"),
        ("REDIRECT_MAX_HOPS=abc", "must be an integer of at least 1 (hops), not 'abc'"),
        ("SSRF_GUARD_ENABLED=maybe", "must be True or False (or 1 or 0), not 'maybe'"),
        ("CANON_LEARN=always", "must be one of 'off', 'propose', 'apply', not 'always'"),
        ("CANON_HOST_RULES={bad", "must be a table of per-host rules (crawler/defaults"),
    ],
)
def test_a_crawl_with_a_bad_setting_stops_before_the_engine_starts(
    setting: str, allowed: str, tmp_path: Path
) -> None:
    store = tmp_path / "store.sqlite"
    with TestServer({"/": html("/a"), "/a": html()}) as site:
        line = refused(
            "crawl", "site", "-a", f"start_url={site.url}/", "-s", setting,
            "-s", f"STORE_URL=sqlite:///{store}",
        )  # fmt: skip
        assert site.paths() == []  # nothing fetched, not even robots.txt
    name = setting.partition("=")[0]
    assert line.startswith(f"error: {name} {allowed}"), line
    assert not store.exists()


@pytest.mark.parametrize(
    "command",
    [
        ["seed", "site", "https://e.com/"],
        ["frontier", "site"],
        ["rebuild-filter", "site"],
        ["redirects"],
        ["canonicals"],
        ["same-content"],
        ["audit-rules"],
    ],
)
def test_every_command_checks_the_settings_before_using_them(
    command: list[str], redis_url: str, tmp_path: Path
) -> None:
    """Each would otherwise run (against a live Redis and a store that exists) and never
    say that the crawl it reads is configured with an error rate of 2."""
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    line = refused(
        *command, "-s", "SEEN_FILTER_ERROR_RATE=2", "-s", f"REDIS_URL={redis_url}",
        "-s", f"STORE_URL={store}",
    )  # fmt: skip
    assert line.startswith("error: SEEN_FILTER_ERROR_RATE must be a number above 0 and below 1")
    assert line.endswith("not '2'")


REDIS_COMMANDS = [
    ["crawl", "site", "-a", "start_url=https://e.com/"],
    ["seed", "site", "https://e.com/"],
    ["frontier", "site"],
    ["rebuild-filter", "site"],
]


@pytest.mark.parametrize("command", REDIS_COMMANDS, ids=lambda command: command[0])
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://127.0.0.1:abc/0", "has a port that is not a number from 1 to 65535 ('abc')"),
        ("redis://127.0.0.1:99999/0", "has a port that is not a number from 1 to 65535"),
        (
            f"redis://:{PASSWORD.replace('/', '')}@[::1/0",
            "has an IPv6 address without its closing ']'",
        ),
        (f"redis://:{PASSWORD}@127.0.0.1:6379/0", "has a user or password holding '/'"),
    ],
    ids=["port-text", "port-range", "ipv6", "slash-in-password"],
)
def test_a_redis_url_that_is_not_one(command: list[str], url: str, problem: str) -> None:
    line = refused(*command, "-s", f"REDIS_URL={url}")
    assert line.startswith(f"error: REDIS_URL {problem}"), line
    assert PASSWORD[:2] not in line  # before: "port ... as 's3'" for the slash's case


@pytest.mark.parametrize(
    "command",
    [["crawl", "site", "-a", "start_url=https://e.com/"], ["redirects"], ["canonicals"]],
    ids=lambda command: command[0],
)
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"postgresql://crawler:{PASSWORD}@127.0.0.1:abc/db", "has a port that is not a number"),
        (f"postgresql://crawler:{PASSWORD}@127.0.0.1:99999/db", "has port 99999"),
    ],
    ids=["port-text", "port-range"],
)
def test_a_store_url_that_is_not_one(command: list[str], url: str, problem: str) -> None:
    line = refused(*command, "-s", f"STORE_URL={url}")
    assert line.startswith(f"error: STORE_URL {problem}"), line
    assert PASSWORD[:2] not in line and "***@127.0.0.1" in line
