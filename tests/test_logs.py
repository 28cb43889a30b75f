"""What a crawl's log tells a person, read from real crawls in processes of their own: the
items a spider scraped, Scrapy's stats dump, where the records went and what to run next, no
warning on a normal crawl, the Redis set-up warning once per shared crawl, and one line at
the start of a crawl that its delay makes slow."""

from __future__ import annotations

import ast
import itertools
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crawls import ROOT, site_crawl_command
from tests.httpserver import TestServer, html, redirect
from tests.servers import RedisServer
from tests.user_project import adopt

SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]
PAGES = 6
#: A small site: a root linking ``PAGES`` pages, each linking back; one redirect.
SITE = {
    "/": html(*(f"/p/{i}" for i in range(PAGES)), "/old"),
    "/old": redirect("/p/0"),
} | {f"/p/{i}": html("/") for i in range(PAGES)}
SLOW_LINE = re.compile(r"INFO: Slow crawl: .*")


def warning_lines(log: str) -> list[str]:
    """The log's WARNING lines, but for the loop-stall watch's: a loaded test machine (the
    suite beside other work) can stall any crawl's loop, which that warning rightly says."""
    return [
        line
        for line in re.findall(r".* WARNING: .*", log)
        if "Twisted's loop was blocked" not in line
    ]


def run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` run to its end; it must succeed."""
    result = subprocess.run(
        command, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
        timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    return result


def user_project(tmp_path: Path, *, fast: bool) -> Path:
    """A ``startproject`` project with a ``CrawlSpider`` (``mysite``, an item per page) and
    the README's ADDONS line; ``fast=False`` keeps the template's ``DOWNLOAD_DELAY = 1`` and
    ``CONCURRENT_REQUESTS_PER_DOMAIN = 1``."""
    run([*SCRAPY, "startproject", "myproject"], tmp_path)
    adopt(tmp_path / "myproject", "mysite", fast=fast)
    return tmp_path / "myproject"


def summary_of(log: str) -> str:
    """The crawl summary, which must be the last thing logged."""
    summary = log[log.rindex("Crawl summary") :]
    assert not re.search(r"\] (DEBUG|INFO|WARNING|ERROR):", summary), log[-3000:]
    return summary


def summary_value(summary: str, label: str) -> str:
    found = re.search(rf"^  {re.escape(label)}:\s+(.*)$", summary, re.MULTILINE)
    assert found, summary
    return found[1]


def scrapy_stats(log: str) -> dict[str, object]:
    """Scrapy's stats dump at close, as a tool parsing Scrapy logs reads it."""
    found = re.search(r"INFO: Dumping Scrapy stats:\n(\{.*?\})\n", log, re.DOTALL)
    assert found, log[-3000:]
    text = re.sub(r"datetime\.datetime\([^)]*\)", "None", found[1])
    stats = ast.literal_eval(text)
    assert isinstance(stats, dict)
    return stats


def test_items_in_the_progress_line_and_the_summary_and_scrapys_stats_dump(
    tmp_path: Path,
) -> None:
    """A user's ``CrawlSpider`` yields an item per page: the periodic progress line counts
    them as they come, the summary gives the total, and Scrapy's stats dump is in the log at
    INFO (with the same count), before the summary. A normal embedded crawl warns of
    nothing, and a crawl without a delay says nothing of its pace."""
    project = user_project(tmp_path, fast=True)
    store = f"sqlite:///{tmp_path / 'records.sqlite'}"
    with TestServer(SITE, delay=0.3) as server:
        log = run(
            [*SCRAPY, "crawl", "mysite", "-s", f"STORE_URL={store}", "-s", "LOGSTATS_INTERVAL=0.5",
             "-s", "CONCURRENT_REQUESTS=1"],
            project, SITE_URL=server.url,
        ).stderr  # fmt: skip
    items = [int(n) for n in re.findall(r"INFO: Progress: \d+ pages, (\d+) items", log)]
    assert len(items) >= 3 and items == sorted(items) and items[-1] > 0, log[-3000:]
    stats = scrapy_stats(log)
    assert stats["item_scraped_count"] == PAGES  # every page the rule followed
    summary = summary_of(log)
    assert log.index("Dumping Scrapy stats") < log.index(summary)
    assert summary_value(summary, "items scraped") == str(PAGES)
    assert not warning_lines(log), warning_lines(log)
    assert not SLOW_LINE.search(log)


def next_commands(summary: str) -> list[tuple[list[str], str]]:
    """The commands the summary says to run next, each as arguments and what it is for."""
    found = re.search(r"^  next:\s+(.*?)(?:\Z|\n  \S)", summary, re.MULTILINE | re.DOTALL)
    assert found, summary
    commands = []
    for line in found[1].splitlines():
        command, _, what = line.strip().partition("  # ")
        commands.append((shlex.split(command.partition(" > ")[0]), what))
    return commands


def test_an_embedded_crawl_warns_of_nothing_and_its_summary_says_where_and_what_next(
    tmp_path: Path,
) -> None:
    """The summary names the record store and the commands to run next, and those commands,
    run as printed, give the redirect map and the report of this crawl."""
    store = tmp_path / "records.sqlite"
    with TestServer(SITE) as server:
        log = run(site_crawl_command(f"{server.url}/", store), ROOT).stderr
    assert not warning_lines(log), warning_lines(log)
    summary = summary_of(log)
    assert summary_value(summary, "records in") == f"sqlite:///{store}"
    commands = next_commands(summary)
    assert [what for _, what in commands] == ["redirect map", "audit report"]
    nginx, report = (run([*SCRAPY, *command[1:]], ROOT) for command, _ in commands)
    assert commands[0][0][:4] == ["scrapy", "redirects", "--format", "nginx"]
    entries = [line for line in nginx.stdout.splitlines() if "/old" in line]
    assert entries and all("/p/0" in line for line in entries), nginx.stdout
    assert "<html" in report.stdout.lower()


@pytest.fixture
def redis_with_password() -> Iterator[RedisServer]:
    with RedisServer(bloom=True, password="s3cret-pass") as server:
        yield server


def test_a_shared_crawls_summary_hides_the_password_and_names_the_frontier_command(
    tmp_path: Path, redis_with_password: RedisServer
) -> None:
    store = tmp_path / "records.sqlite"
    redis_url = redis_with_password.url
    with TestServer(SITE) as server:
        log = run(site_crawl_command(f"{server.url}/", store, "-s", f"REDIS_URL={redis_url}"), ROOT)
    assert "s3cret-pass" not in log.stderr + log.stdout
    summary = summary_of(log.stderr)
    commands = next_commands(summary)
    frontier, what = commands[-1]
    assert what.startswith("queue, leases, failures")
    assert frontier[:3] == ["scrapy", "frontier", "site"]
    assert frontier[3:] == ["-s", f"REDIS_URL={redis_url.replace('s3cret-pass', '***')}"]
    # With the password put back, the command runs and shows this crawl.
    frontier[-1] = frontier[-1].replace("***", "s3cret-pass")
    shown = run([*SCRAPY, *frontier[1:]], ROOT).stdout
    seen = re.search(r"seen:\s+([\d,]+) keys", shown)  # the keys this crawl marked seen
    assert seen and int(seen[1].replace(",", "")) >= PAGES, shown


def test_the_no_append_only_file_warning_once_per_shared_crawl(
    tmp_path: Path, redis_url: str
) -> None:
    """On a Redis without appendonly, seeding and reading the crawl say nothing; of its two
    workers, started together, one warns; another crawl (its own prefix) warns again."""
    warning = "has no append-only file"
    shared = ["-s", f"REDIS_URL={redis_url}"]
    with TestServer(SITE, delay=0.05) as server:
        seed = run([*SCRAPY, "seed", "site", f"{server.url}/p/1", *shared], ROOT)
        assert warning not in seed.stderr, seed.stderr[-2000:]
        # Each worker logs to a file: a full pipe would stall it, and the other waits for it.
        paths = [tmp_path / f"w{i}.log" for i in range(2)]
        workers = []
        for i, path in enumerate(paths):
            with path.open("w") as stderr:
                command = site_crawl_command(f"{server.url}/", tmp_path / f"w{i}.sqlite", *shared)
                workers.append(
                    subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
                )
        codes = [worker.wait(timeout=180) for worker in workers]
        logs = [path.read_text() for path in paths]
        assert codes == [0, 0], logs[0][-2000:]
        assert sorted(log.count(warning) for log in logs) == [0, 1], logs
        status = run([*SCRAPY, "frontier", "site", *shared], ROOT)
        assert warning not in status.stderr + status.stdout
        other = site_crawl_command(f"{server.url}/", tmp_path / "other.sqlite", *shared)
        again = run([*other, "-s", "FRONTIER_KEY_PREFIX={other-%(spider)s}"], ROOT)
    assert again.stderr.count(warning) == 1, again.stderr[-2000:]
    # The summary's frontier command names the other crawl's prefix too.
    assert "-s 'FRONTIER_KEY_PREFIX={other-%(spider)s}'  # queue" in again.stderr


@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_a_crawl_on_the_templates_politeness_says_at_start_how_slow_it_is(
    tmp_path: Path, shared: bool, request: pytest.FixtureRequest
) -> None:
    """``startproject``'s ``DOWNLOAD_DELAY = 1`` and ``CONCURRENT_REQUESTS_PER_DOMAIN = 1``:
    one line at the start with the pace and how long 1,000 pages take, naming the settings;
    the pace it states is the one the server sees."""
    project = user_project(tmp_path, fast=False)
    args = ["-s", f"STORE_URL=sqlite:///{tmp_path / 'records.sqlite'}"]
    if shared:
        args += ["-s", f"REDIS_URL={request.getfixturevalue('redis_url')}"]
    site = {"/": html("/p/0", "/p/1"), "/p/0": html("/"), "/p/1": html("/")}
    with TestServer(site) as server:
        log = run([*SCRAPY, "crawl", "mysite", *args], project, SITE_URL=server.url).stderr
        times = sorted(hit.time for hit in server.hits if hit.path != "/robots.txt")
    lines = SLOW_LINE.findall(log)
    assert len(lines) == 1, log[-3000:]
    (line,) = lines
    assert "at most 1.0 request/s per host" in line
    assert "1,000 pages take >= 17 min" in line
    assert "DOWNLOAD_DELAY" in line and "CONCURRENT_REQUESTS_PER_DOMAIN (now 1)" in line
    assert ("across all workers" in line) == shared
    assert log.index(line) < log.index("Crawl summary")
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(times) == 3 and min(gaps) >= 0.5, times  # Scrapy randomizes: 0.5 to 1.5 s
    mode = "shared" if shared else "embedded"
    print(f"seconds between pages ({mode}): {', '.join(f'{gap:.2f}' for gap in gaps)}")
