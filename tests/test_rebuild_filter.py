"""``scrapy rebuild-filter``: after a rule change, URLs the new rules merge with a known one
count as seen, nothing seen before becomes unseen, and a merge is refused unless allowed;
on an embedded crawl's ``JOBDIR`` and on a shared Redis frontier."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from queuelib import queue
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

import bloom_frontier.defaults as defaults
from bloom_frontier.canonical import dedupe_key
from bloom_frontier.canonical.rules import DEFAULT_RULES, rules_from_settings
from bloom_frontier.defaults import with_defaults
from bloom_frontier.frontier.memory import MemoryFrontier
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.serialize import request_to_json
from bloom_frontier.learning.state import LiveRules, RedisRuleState
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import PROPOSED, REVOKED, ParamRule, UrlAlias
from bloom_frontier.pipelines.writer import StoreWriter
from bloom_frontier.redis_client import redis_from_url
from bloom_frontier.seen.joblock import LOCK_FILE, JobdirBusy, JobdirLock
from bloom_frontier.seen.layers import (
    RulesMismatch,
    read_manifest,
    settings_rules_record,
)
from bloom_frontier.seen.rebuild import jobdir_queued_urls, rebuild_redis
from bloom_frontier.spiders.site import SiteSpider
from tests.httpserver import Page, TestServer, html
from tests.redirect_server import ROOT, SCRAPY, scrapy

#: The rule change under test: ``ref`` becomes a tracking parameter on the test host.
STRIP_REF = {"127.0.0.1": {"strip": ["ref"]}}
ROBOTS = Page("User-agent: *\nDisallow: /private\n", content_type="text/plain")


#: The settings a frontier reads: the defaults table's (not Scrapy's: not the reactor, as
#: tests build crawlers in-process).
FRONTIER_SETTINGS = tuple(name for name in dir(defaults) if name.isupper())


def project_settings(**overrides: Any) -> dict[str, Any]:
    settings = with_defaults(Settings())
    return {**{name: settings[name] for name in FRONTIER_SETTINGS}, **overrides}


def env_without_services() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "STORE_URL"}}


def crawl(start_url: str, *options: str) -> None:
    result = scrapy("crawl", "site", "-a", f"start_url={start_url}", *options)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def memory_frontier(settings: dict[str, Any]) -> MemoryFrontier:
    crawler = get_crawler(SiteSpider, settings)
    return MemoryFrontier.from_crawler(crawler)


def urls_admitted(frontier: Any, base: str, *paths: str) -> set[str]:
    admitted = frontier.admit(None, [Request(base + path) for path in paths])
    return {request.url.removeprefix(base) for request in admitted}


def test_embedded_rebuild_on_jobdir(tmp_path: Path) -> None:
    jobdir, store = tmp_path / "job", f"sqlite:///{tmp_path / 'store.sqlite'}"
    rules = json.dumps(STRIP_REF)
    routes = {
        "/": html("/a?ref=1", "/a?ref=2", "/private/x"),
        "/a?ref=1": html(),
        "/a?ref=2": html(),
        "/robots.txt": ROBOTS,
        "/hub": html("/a?ref=3", "/a", "/fresh"),
        "/fresh": html(),
    }
    common = ("-s", f"JOBDIR={jobdir}", "-s", f"STORE_URL={store}")
    with TestServer(routes) as server:
        crawl(f"{server.url}/", *common)
        assert {"/a?ref=1", "/a?ref=2"} <= set(server.paths())

        command = ("rebuild-filter", "site", *common, "-s", f"CANON_HOST_RULES={rules}")
        refused = scrapy(*command)
        assert refused.returncode == 1, refused.stderr[-3000:]
        assert "merges:         1" in refused.stdout and "MERGE into" in refused.stdout
        assert "Refusing to rebuild" in refused.stderr
        assert not (jobdir / "seen-older").exists()  # nothing changed

        done = scrapy(*command, "--allow-merges")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Rebuilt the seen filter" in done.stdout
        assert (jobdir / "seen-older" / "0" / "rules.json").exists()

        # Resumed under the new rules: the merged variants are not fetched, a new page is.
        fetched_before = len(server.paths())
        crawl(f"{server.url}/hub", *common, "-s", f"CANON_HOST_RULES={rules}")
        fetched = server.paths()[fetched_before:]
    assert "/fresh" in fetched and "/hub" in fetched
    assert not [path for path in fetched if path.startswith("/a")], fetched

    settings = project_settings(JOBDIR=str(jobdir), CANON_HOST_RULES=STRIP_REF)
    frontier = memory_frontier(settings)
    # Only the old filter knew /private/x (refused by robots.txt, never recorded): still seen.
    assert urls_admitted(frontier, server.url, "/private/x", "/a?ref=9", "/new") == {"/new"}
    frontier.close()

    # The old rules no longer fit the filter: refused with the fix, not a silent recrawl.
    with pytest.raises(RulesMismatch, match="rebuild-filter"):
        memory_frontier(project_settings(JOBDIR=str(jobdir)))


def redis_worker(redis_url: str, store: str, **overrides: Any) -> RedisFrontier:
    settings = project_settings(REDIS_URL=redis_url, STORE_URL=store, **overrides)
    crawler = get_crawler(SiteSpider, settings)
    assert crawler.stats is not None
    return RedisFrontier.from_settings(crawler.settings, "site", crawler.stats)


BASE = "http://127.0.0.1:9"


def fetched_aliases(store_url: str, *paths: str) -> None:
    """Record ``paths`` as fetched under the built-in rules, as a crawl does."""
    store = StoreWriter.from_url(store_url)
    aliases = []
    for path in paths:
        key = dedupe_key(BASE + path)
        aliases.append(UrlAlias(BASE + path, key, DEFAULT_RULES.version, "fetched"))
    store.add_url_aliases(aliases)
    store.close()


@pytest.mark.parametrize("shards", [1, 3])
def test_shared_rebuild_while_a_worker_adds_keys(
    redis_url: str, sqlite_url: str, shards: int
) -> None:
    old = redis_worker(redis_url, sqlite_url, SEEN_FILTER_SHARDS=shards)
    assert urls_admitted(old, BASE, "/a?ref=1", "/a?ref=2", "/q?ref=1", "/gone") == {
        "/a?ref=1",
        "/a?ref=2",
        "/q?ref=1",
        "/gone",
    }
    fetched_aliases(sqlite_url, "/a?ref=1", "/a?ref=2")
    # Fetch the /a pages and /gone (never recorded, as if robots.txt had refused it); /q?ref=1
    # stays queued in the frontier.
    for request in old.lease(10):
        if "/q" not in request.url:
            old.admit(request, [])

    settings = Settings(
        project_settings(REDIS_URL=redis_url, CANON_HOST_RULES=STRIP_REF, SEEN_FILTER_SHARDS=shards)
    )
    new_rules = rules_from_settings(settings)
    client = redis_from_url(redis_url)
    manifest = read_manifest(client, "{site}")
    store = StoreReader.from_url(sqlite_url)

    def keys_while_the_old_worker_runs() -> Any:
        yield from (dedupe_key(alias["url"], new_rules) for alias in store.url_aliases())
        yield dedupe_key(f"{BASE}/q?ref=1", new_rules)
        # A worker still on the old rules admits a link while the rebuild runs.
        assert urls_admitted(old, BASE, "/during") == {"/during"}

    record = settings_rules_record(settings, new_rules)
    new_key, _ = rebuild_redis(
        client, "{site}", manifest, keys_while_the_old_worker_runs(), record, settings
    )
    store.close()
    assert new_key == "{site}:seen:g1"
    assert json.loads(client.get("{site}:seen:layers"))["older"][0]["key"] == "{site}:seen"
    client.close()
    old.close()

    new = redis_worker(redis_url, sqlite_url, CANON_HOST_RULES=STRIP_REF, SEEN_FILTER_SHARDS=shards)
    assert new.keys.seen == "{site}:seen:g1"
    # Merged with fetched and queued URLs, added during the rebuild, only in the old filter:
    # all seen. A new page is new, once.
    paths = ("/a?ref=3", "/a", "/q?ref=7", "/during", "/gone", "/new")
    assert urls_admitted(new, BASE, *paths) == {"/new"}
    assert urls_admitted(new, BASE, "/new") == set()
    assert new.stats.get_value("seen/duplicate") == 6
    # Scrapy's dupefilter question asks the older layer too (/gone is only there).
    assert new.request_seen(Request(f"{BASE}/gone"))
    assert not new.request_seen(Request(f"{BASE}/never"))
    new.close()

    with pytest.raises(RulesMismatch, match=r"filled under rules r\d+\+"):
        redis_worker(redis_url, sqlite_url, SEEN_FILTER_SHARDS=shards)


def test_shared_rebuild_command(redis_url: str, sqlite_url: str) -> None:
    worker = redis_worker(redis_url, sqlite_url)
    urls_admitted(worker, BASE, "/a?ref=1", "/a?ref=2", "/q?ref=1")
    worker.close()
    fetched_aliases(sqlite_url, "/a?ref=1", "/a?ref=2")
    command = (
        "rebuild-filter", "site",
        "-s", f"REDIS_URL={redis_url}", "-s", f"STORE_URL={sqlite_url}",
        "-s", f"CANON_HOST_RULES={json.dumps(STRIP_REF)}",
    )  # fmt: skip
    refused = scrapy(*command, env=env_without_services())
    assert refused.returncode == 1 and "MERGE into" in refused.stdout, refused.stderr[-3000:]
    done = scrapy(*command, "--allow-merges", env=env_without_services())
    assert done.returncode == 0, done.stderr[-3000:]
    # 2 aliases from the store: 1 key. The 3 queued requests are keyed when leased.
    assert "2 URLs (2 from the store, 0 from the frontier), 1 keys" in done.stdout
    assert "3 requests wait in the queue" in done.stdout
    again = scrapy(*command, "--allow-merges", env=env_without_services())
    assert "already keyed under these rules" in again.stdout

    new = redis_worker(redis_url, sqlite_url, CANON_HOST_RULES=STRIP_REF)
    # /q is new: its queued variant /q?ref=1 was never fetched (dropped when leased, as a
    # test_learning_rekey crawl shows).
    assert urls_admitted(new, BASE, "/a?ref=5", "/q", "/other") == {"/q", "/other"}
    new.close()


def test_jobdir_queue_is_read_without_being_consumed(tmp_path: Path) -> None:
    """Requests waiting in Scrapy's JOBDIR disk queues (a LIFO file per priority, FIFO
    directories for start requests) are part of what the crawl knows."""
    root = tmp_path / "requests.queue"
    root.mkdir()
    lifo = queue.LifoDiskQueue(root / "0")
    fifo = queue.FifoDiskQueue(root / "0s")
    for target, path in ((lifo, "/lifo/1"), (lifo, "/lifo/2"), (fifo, "/fifo/1")):
        target.push(request_to_json(Request(BASE + path)).encode())
    lifo.close()
    fifo.close()
    (root / "active.json").write_text("[0]")
    sizes = {path: path.stat().st_size for path in root.rglob("*") if path.is_file()}
    assert sorted(jobdir_queued_urls(tmp_path)) == [
        f"{BASE}/fifo/1",
        f"{BASE}/lifo/1",
        f"{BASE}/lifo/2",
    ]
    assert {path: path.stat().st_size for path in root.rglob("*") if path.is_file()} == sizes


def test_rebuild_refuses_while_a_crawl_runs_on_the_jobdir(tmp_path: Path) -> None:
    jobdir, store = tmp_path / "job", f"sqlite:///{tmp_path / 'store.sqlite'}"
    routes = {"/": html(*(f"/p{i}?ref=1" for i in range(40))), "/robots.txt": ROBOTS}
    routes |= {f"/p{i}?ref=1": html() for i in range(40)}
    common = ("-s", f"JOBDIR={jobdir}", "-s", f"STORE_URL={store}")
    command = ("rebuild-filter", "site", *common, "-s", f"CANON_HOST_RULES={json.dumps(STRIP_REF)}")
    with TestServer(routes, delay=0.3) as server:
        running = subprocess.Popen(
            [*SCRAPY, "crawl", "site", "-a", f"start_url={server.url}/", *common,
             "-s", "CONCURRENT_REQUESTS=1"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while "scrapy crawl" not in _read(jobdir / LOCK_FILE):
                assert running.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
            while len(server.paths()) < 3:  # the crawl is under way: its filter exists
                assert running.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
            refused = scrapy(*command, "--allow-merges")
            assert refused.returncode == 2, refused.stdout + refused.stderr
            (line,) = refused.stderr.strip().splitlines()
            assert line.startswith(f"error: {jobdir} is in use by scrapy crawl (pid {running.pid})")
            assert "Rebuilt" not in refused.stdout
            assert not (jobdir / "seen-older").exists() and not (jobdir / "seen.rebuild").exists()
            assert running.poll() is None  # the crawl goes on
        finally:
            running.send_signal(signal.SIGINT)  # pauses the crawl, as Ctrl-C does
            _, errors = running.communicate(timeout=120)
        assert running.returncode == 0, errors[-3000:]
        # Stopped: the rebuild runs.
        done = scrapy(*command, "--allow-merges")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Rebuilt the seen filter" in done.stdout


def test_a_process_holding_the_jobdir_lock_is_named_and_released_by_its_death(
    tmp_path: Path,
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import time; from bloom_frontier.seen.joblock import JobdirLock; "
         f"lock = JobdirLock({str(tmp_path)!r}); lock.acquire('a test'); print('held', flush=1); "
         "time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(JobdirBusy, match=rf"in use by a test \(pid {holder.pid}\)"):
            JobdirLock(tmp_path).acquire("another")
        # A crawl on that JOBDIR stops before it starts, with one line.
        second = scrapy(
            "crawl",
            "site",
            "-a",
            "start_url=http://127.0.0.1:9/",
            "-s",
            f"JOBDIR={tmp_path}",
            "-s",
            f"STORE_URL=sqlite:///{tmp_path}/s.db",
        )
        assert second.returncode == 2, second.stderr[-3000:]
        assert second.stderr.strip().splitlines() == [
            f"error: {tmp_path} is in use by a test (pid {holder.pid}): stop it first (Ctrl-C "
            "pauses a crawl), then run again"
        ]
    finally:
        holder.kill()  # kill -9: the kernel releases the lock
        holder.wait()
    with JobdirLock(tmp_path) as lock:
        lock.acquire("the next one")
        assert "the next one" in _read(tmp_path / LOCK_FILE)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_an_applied_learned_rule_is_rebuilt_into_the_filter_and_its_revocation_undone(
    tmp_path: Path,
) -> None:
    """The user applies a learned rule (``from`` changes nothing): the rebuild keys under it,
    so the variants it merges count as seen. Revoked later, the next rebuild retires the
    layer keyed under it: the pages it merged are fetched again."""
    jobdir, store = tmp_path / "job", f"sqlite:///{tmp_path / 'store.sqlite'}"
    routes = {
        "/": html("/a?from=1", "/a?from=2"),
        "/hub": html("/a?from=3", "/a", "/fresh"),
        "/hub2": html("/a?from=4", "/a?from=1", "/a", "/a?from=3"),
        "/robots.txt": ROBOTS,
    }
    routes |= {path: html() for path in ("/a", "/a?from=1", "/a?from=2", "/a?from=3")}
    routes |= {"/a?from=4": html(), "/fresh": html()}
    common = ("-s", f"JOBDIR={jobdir}", "-s", f"STORE_URL={store}")
    rebuild = ("rebuild-filter", "site", *common)
    with TestServer(routes) as server:
        crawl(f"{server.url}/", *common)
        proposed = ParamRule("127.0.0.1", "from", PROPOSED, ((f"{server.url}/a", "x"),))
        write_rule(store, proposed)
        applied = scrapy("audit-rules", "-s", f"STORE_URL={store}", "--apply", proposed.name)
        assert "0 proposed, 1 applied" in applied.stdout, applied.stdout + applied.stderr

        refused = scrapy(*rebuild)
        assert refused.returncode == 1, refused.stderr[-3000:]
        assert "MERGE into" in refused.stdout and "APPLIED 127.0.0.1?from" in refused.stdout
        assert "Refusing to rebuild" in refused.stderr
        done = scrapy(*rebuild, "--allow-merges")
        assert done.returncode == 0, done.stderr[-3000:]
        recorded = json.loads((jobdir / "seen" / "rules.json").read_text())
        assert recorded["learned"] == {"127.0.0.1": ["from"]}

        # Resumed (CANON_LEARN="propose" keys with applied rules): /a and its variants are
        # one page, fetched already.
        before = len(server.paths())
        crawl(f"{server.url}/hub", *common)
        assert pages_since(server, before) == ["/fresh", "/hub"]

        counter = {"url_a": f"{server.url}/a", "url_b": f"{server.url}/a?from=4"}
        counter["reason"] = "re-check differs"
        write_rule(store, replace(proposed, state=REVOKED, counter_example=counter))
        undone = scrapy(*rebuild)
        assert undone.returncode == 0, undone.stderr[-3000:]
        assert "Retired" in undone.stdout and "127.0.0.1?from" in undone.stdout
        assert (jobdir / "seen-retired" / "0" / "rules.json").exists()
        assert [p.name for p in (jobdir / "seen-older").iterdir()] == ["0"]  # the first one

        before = len(server.paths())
        crawl(f"{server.url}/hub2", *common)
        fetched = pages_since(server, before)
    # The pages the revoked rule merged are fetched; the ones fetched before are not.
    assert fetched == ["/a", "/a?from=3", "/a?from=4", "/hub2"]


def pages_since(server: TestServer, before: int) -> list[str]:
    return sorted(path for path in server.paths()[before:] if path != "/robots.txt")


def write_rule(store_url: str, rule: ParamRule) -> None:
    store = StoreWriter.from_url(store_url)
    store.add_param_rule(rule)
    store.close()


def test_shared_rebuild_keys_under_the_rules_learned_in_redis(
    redis_url: str, sqlite_url: str
) -> None:
    """``CANON_LEARN="apply"`` put ``from`` in the crawl's shared rules: the rebuild keys
    under it, and a worker started afterwards keys under the rebuilt filter's version with
    the learned rules (as the learning extension sets it up), so the variants are seen."""
    worker = redis_worker(redis_url, sqlite_url)
    assert len(urls_admitted(worker, BASE, "/a?from=1", "/a?from=2", "/b")) == 3
    worker.close()
    fetched_aliases(sqlite_url, "/a?from=1", "/a?from=2", "/b")
    client = redis_from_url(redis_url)
    assert RedisRuleState(client, "{site}").publish(0, {"127.0.0.1": ["from"]})
    command = (
        "rebuild-filter", "site", "-s", f"REDIS_URL={redis_url}", "-s", f"STORE_URL={sqlite_url}"
    )  # fmt: skip
    refused = scrapy(*command, env=env_without_services())
    assert refused.returncode == 1 and "MERGE into" in refused.stdout, refused.stdout
    assert "Learned rules in force: 127.0.0.1?from" in refused.stdout
    done = scrapy(*command, "--allow-merges", env=env_without_services())
    assert done.returncode == 0, done.stderr[-3000:]
    current = read_manifest(client, "{site}")["current"]
    assert current["rules"]["learned"] == {"127.0.0.1": ["from"]}

    new = redis_worker(redis_url, sqlite_url)  # the same CANON_HOST_RULES: accepted
    assert new.keyer.rules.version == current["rules"]["version"]
    live = LiveRules(Settings(), RedisRuleState(client, "{site}"))
    live.key_version = new.keyer.rules.version
    new.keyer.use_rules(live)
    assert urls_admitted(new, BASE, "/a?from=7", "/a", "/b?from=2", "/c") == {"/c"}
    new.close()
    client.close()
