"""Every command answers bad input and absent servers as a user needs: one line on stderr
saying what is wrong and what to do, a non-zero exit, no traceback, no password, within 10 s
even when a server does not answer.

On an idle machine Scrapy starts in about 1.5 s; on the shared test machine it can take 5 s
or more, so the time a command spends on top of a bare ``scrapy version`` measured in the
same run is what is held under :data:`WAIT_BUDGET` (the clients' timeouts allow about 4 s;
before, a Redis that was down took 16 s and a ``rediss://`` URL on a plain port 144 s).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.httpserver import TestServer, html
from tests.redirect_server import scrapy
from tests.servers import RedisServer, free_port

PASSWORD = "s3cret-pw"
#: Seconds a failing command may take beyond Scrapy's start-up.
WAIT_BUDGET = 8.0
WRONG = "wr0ng-pw-value"


@dataclass
class Outcome:
    code: int
    stderr: str
    elapsed: float
    stdout: str = ""


def run(*args: str, **env: str) -> Outcome:
    environment = {**os.environ, **env}
    for name in ("REDIS_URL", "STORE_URL", "http_proxy", "https_proxy", "HTTP_PROXY"):
        if name not in env:
            environment.pop(name, None)
    started = time.monotonic()
    done = scrapy(*args, env=environment)
    return Outcome(done.returncode, done.stderr, time.monotonic() - started, done.stdout)


@pytest.fixture(scope="module")
def startup() -> float:
    """Seconds a bare ``scrapy version`` takes here, now."""
    return min(run("version").elapsed for _ in range(2))


Check = Callable[..., None]


@pytest.fixture
def fails_cleanly(startup: float) -> Check:
    """Asserts that a command's outcome is one clean line naming each of ``fragments``."""

    def check(outcome: Outcome, *fragments: str) -> None:
        lines = outcome.stderr.splitlines()
        assert len(lines) == 1, outcome.stderr
        assert lines[0].startswith("error: "), outcome.stderr
        for fragment in fragments:
            assert fragment in lines[0]
        assert outcome.code == 2
        assert PASSWORD not in outcome.stderr and WRONG not in outcome.stderr
        assert outcome.elapsed - startup < WAIT_BUDGET, (outcome.elapsed, startup)

    return check


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    """A RedisBloom server that wants a password."""
    with RedisServer(password=PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def silent_server() -> Iterator[int]:
    """A port that accepts connections (the kernel does) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.fixture
def down() -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"


def test_seed_file_that_is_binary_or_missing(
    tmp_path: Path, redis_url: str, fails_cleanly: Check
) -> None:
    binary = tmp_path / "seeds.bin"
    binary.write_bytes(b"\x00\xff\xfe\x80 not text")
    outcome = run("seed", "site", "--file", str(binary), "-s", f"REDIS_URL={redis_url}")
    fails_cleanly(outcome, "seeds.bin is not UTF-8 text", "one URL per line")
    missing = tmp_path / "nope.txt"
    outcome = run("seed", "site", "--file", str(missing), "-s", f"REDIS_URL={redis_url}")
    fails_cleanly(outcome, "cannot read", "nope.txt", "No such file")


@pytest.mark.parametrize("command", [["seed", "site", "https://e.com/"], ["frontier", "site"]])
def test_wrong_password(
    command: list[str], locked_redis: RedisServer, fails_cleanly: Check
) -> None:
    url = locked_redis.url.replace(PASSWORD, WRONG)
    fails_cleanly(run(*command, "-s", f"REDIS_URL={url}"), "password in REDIS_URL")


@pytest.mark.parametrize(
    "command",
    [
        ["seed", "site", "https://e.com/"],
        ["frontier", "site"],
        ["crawl", "site", "-a", "start_url=https://e.com/"],
    ],
)
def test_redis_down(command: list[str], down: str, fails_cleanly: Check) -> None:
    fails_cleanly(run(*command, "-s", f"REDIS_URL={down}"), "Redis", "REDIS_URL")


@pytest.mark.parametrize(
    "command", [["seed", "site", "https://e.com/"], ["frontier", "site"], ["crawl", "site"]]
)
def test_redis_that_does_not_answer(
    command: list[str], silent_server: int, fails_cleanly: Check
) -> None:
    url = f"redis://127.0.0.1:{silent_server}/0"
    if command[0] == "crawl":
        command = [*command, "-a", "start_url=https://e.com/"]
    fails_cleanly(run(*command, "-s", f"REDIS_URL={url}"), "did not answer in time")


def test_rediss_against_a_plain_port(redis_url: str, fails_cleanly: Check) -> None:
    url = redis_url.replace("redis://", "rediss://")
    fails_cleanly(run("frontier", "site", "-s", f"REDIS_URL={url}"), "TLS port")


@pytest.mark.parametrize("command", [["seed", "site", "https://e.com/"], ["frontier", "site"]])
def test_http_redis_url(command: list[str], fails_cleanly: Check) -> None:
    url = f"http://:{PASSWORD}@127.0.0.1:6379/"
    fails_cleanly(run(*command, "-s", f"REDIS_URL={url}"), "REDIS_URL must start with")


@pytest.mark.parametrize(
    "command",
    [["seed", "nosuch", "https://e.com/"], ["frontier", "nosuch"], ["crawl", "nosuch"]],
)
def test_unknown_spider(command: list[str], redis_url: str, fails_cleanly: Check) -> None:
    outcome = run(*command, "-s", f"REDIS_URL={redis_url}")
    fails_cleanly(outcome, "Spider not found: nosuch", "scrapy list")


@pytest.mark.parametrize("command", ["redirects", "canonicals", "audit-rules"])
def test_store_url_that_is_not_one(command: str, fails_cleanly: Check) -> None:
    outcome = run(command, "-s", "STORE_URL=notaurl")
    fails_cleanly(outcome, "STORE_URL is not a database URL", "postgresql://")


def test_database_down_masks_the_password(fails_cleanly: Check) -> None:
    url = f"postgresql://crawler:{PASSWORD}@127.0.0.1:{free_port()}/records"
    outcome = run("redirects", "-s", f"STORE_URL={url}")
    fails_cleanly(outcome, "cannot use the record store", "check STORE_URL")


def test_crawl_with_store_url_that_is_not_one(fails_cleanly: Check) -> None:
    outcome = run("crawl", "site", "-a", "start_url=https://e.com/", "-s", "STORE_URL=notaurl")
    fails_cleanly(outcome, "STORE_URL is not a database URL")


def test_crawl_with_a_proxy_and_the_guard_refuses_and_says_why(fails_cleanly: Check) -> None:
    outcome = run("crawl", "site", "-a", "start_url=https://e.com/", http_proxy="http://p:3128")
    fails_cleanly(outcome, "SSRF guard", "SSRF_ALLOW_PROXY")


@pytest.mark.parametrize("command", ["crawl", "redirects"])
def test_a_store_written_by_a_newer_version(
    command: str, tmp_path: Path, fails_cleanly: Check
) -> None:
    store = tmp_path / "newer.sqlite"
    with sqlite3.connect(store) as connection:
        connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        connection.execute("INSERT INTO alembic_version VALUES ('9999_from_the_future')")
    args = ["crawl", "site", "-a", "start_url=https://e.com/"] if command == "crawl" else [command]
    outcome = run(*args, "-s", f"STORE_URL=sqlite:///{store}")
    fails_cleanly(outcome, "9999_from_the_future", "newer bloom-frontier")


def test_frontier_status_against_a_redis_without_bloom(fails_cleanly: Check) -> None:
    with RedisServer(bloom=False) as server:
        outcome = run("frontier", "site", REDIS_URL=server.url)
    fails_cleanly(outcome, "no Bloom module", "--loadmodule")


@pytest.mark.parametrize("near", ["1.5", "0", "-0.2", "nan", "close"])
def test_same_content_near_out_of_range(near: str, tmp_path: Path) -> None:
    outcome = run("same-content", "--near", near, STORE_URL=f"sqlite:///{tmp_path / 's.sqlite'}")
    assert outcome.code == 2
    assert "Traceback" not in outcome.stderr
    assert f"argument --near: {near!r} is not a similarity above 0 and at most 1" in outcome.stderr


def test_canon_of_something_that_is_not_a_url() -> None:
    outcome = run("canon", "not a url")
    assert outcome.code == 1
    expected = ["error: not-absolute: 'not a url' (no scheme)"]
    assert outcome.stderr.splitlines() == expected, outcome.stderr


@pytest.mark.parametrize("command", [["crawl", "site"], ["redirects"], ["seed", "site", "x"]])
def test_project_commands_outside_a_project(command: list[str], tmp_path: Path) -> None:
    """As Scrapy's own project-only commands: one usage error, no crawler process, no log."""
    environment = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("scrapy")), *command],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "scrapy: error: this command works only inside a Scrapy project (a folder with scrapy.cfg)"
    )
    assert " INFO: " not in done.stderr and " DEBUG: " not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ([], "start_url is required"),
        (["-a", "start_url=notaurl"], "start_url='notaurl' is not an absolute http:// or https://"),
        (["-a", "start_url=ftp://e.com/"], "is not an absolute http:// or https:// URL"),
    ],
)
def test_crawl_site_without_a_usable_start_url(
    arguments: list[str], problem: str, tmp_path: Path, fails_cleanly: Check
) -> None:
    store = tmp_path / "store.sqlite"
    outcome = run("crawl", "site", *arguments, "-s", f"STORE_URL=sqlite:///{store}")
    fails_cleanly(outcome, "spider argument: ", problem, "-a start_url=https://example.com/")
    assert not store.exists()  # refused before anything was opened


@pytest.mark.parametrize("change", ["CANON_HOST_RULES", "rules version"])
def test_resuming_a_jobdir_under_other_rules(
    change: str, tmp_path: Path, fails_cleanly: Check
) -> None:
    """The refusal alone: before, Scrapy's ``RuntimeError: Engine slot not assigned``
    followed it (the scheduler failed to build while the engine was opening the spider)."""
    jobdir = tmp_path / "job"
    with TestServer({"/": html("/p?sid=1"), "/p?sid=1": html()}) as server:
        options = ["-a", f"start_url={server.url}/", "-s", f"JOBDIR={jobdir}"]
        options += ["-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}"]
        first = run("crawl", "site", *options)
        assert first.code == 0, first.stderr[-3000:]
        hits = len(server.paths())
        if change == "CANON_HOST_RULES":
            options += ["-s", 'CANON_HOST_RULES={"127.0.0.1": {"strip": ["sid"]}}']
        else:  # a filter filled by an older version of the built-in rules
            rules = jobdir / "seen" / "rules.json"
            rules.write_text(rules.read_text().replace('"version": "r', '"version": "r0'))
        outcome = run("crawl", "site", *options)
        assert len(server.paths()) == hits  # nothing fetched
    fails_cleanly(outcome, "the seen filter at", "was filled under rules", "rebuild-filter")


def test_seed_outside_the_spiders_allowed_domains(redis_url: str) -> None:
    outcome = run(
        "seed",
        "docs",
        "https://docs.example.com/a",
        "http://other.example/",
        "https://docs.example.com.evil.example/",
        "-s",
        "SPIDER_MODULES=tests.spiders",
        "-s",
        f"REDIS_URL={redis_url}",
    )
    assert outcome.code == 0, outcome.stderr
    assert outcome.stdout.splitlines() == [
        "1 queued, 0 already seen, 0 invalid, 2 outside allowed_domains (docs.example.com)"
    ]
    skipped = [line for line in outcome.stderr.splitlines() if line.startswith("skipped")]
    assert skipped == [
        "skipped 'http://other.example/': outside the spider's allowed_domains (docs.example.com)",
        "skipped 'https://docs.example.com.evil.example/': outside the spider's "
        "allowed_domains (docs.example.com)",
    ]


def test_a_shared_crawl_under_other_rules_than_its_filter(
    redis_url: str, fails_cleanly: Check
) -> None:
    """The seed recorded the crawl's rules beside its filter; a worker with other rules
    refuses to start, in one line."""
    seeded = run("seed", "site", "https://e.com/", "-s", f"REDIS_URL={redis_url}")
    assert seeded.code == 0, seeded.stderr
    rules = 'CANON_HOST_RULES={"e.com": {"strip": ["sid"]}}'
    outcome = run(
        "crawl", "site", "-a", "start_url=https://e.com/", "-s", rules, REDIS_URL=redis_url
    )
    fails_cleanly(outcome, "the seen filter at", "was filled under rules", "rebuild-filter")
