"""Prometheus metrics: a real Prometheus scrapes two workers of a shared crawl and its query API
adds up to what the site served; ``scrapy frontier --metrics`` gives the crawl-wide view; the
alerting rules pass ``promtool`` and load in Prometheus; the dashboard and the rules name only
metrics the workers export, each documented; a bad ``METRICS_PORT`` or a missing extra is one
``error:`` line."""

from __future__ import annotations

import doctest
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import bloom_frontier.metrics
from tests.crawls import ROOT, SCRAPY, site_crawl_command
from tests.httpserver import Page, Route, TestServer, html
from tests.prometheus import PrometheusServer
from tests.servers import RedisServer, ServiceUnavailable, free_port
from tests.services import debian_tool

DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "bloom-frontier.json"
JOB = "bloom-frontier"
#: Seconds a worker keeps serving after its spider closed: several scrape intervals.
LINGER = "4"
FIX = "pip install 'bloom-frontier[metrics]'"
#: Names in PromQL that are Prometheus' own, not the workers'.
PROMETHEUS_OWN = {"up"}


#: Over the whole crawl: a worker's series goes stale once it exits.
WHOLE_CRAWL = "10m"
#: Seconds the crawl may be held open at most, waiting for Prometheus' scrapes: less than
#: the held download's DOWNLOAD_TIMEOUT (30 s), so that it is never retried.
HOLD_TIMEOUT = 20.0
#: Successful scrapes of each worker Prometheus must have taken while the crawl is held:
#: the first may come before the other worker's first status record.
SCRAPES_WHILE_HELD = 2


def site(pages: int) -> dict[str, Route]:
    """A tree of ``pages`` pages, each linking to three more (a queue two workers share),
    under ``/`` that also links to a page not on the site (``/gone``)."""
    routes: dict[str, Route] = {
        f"/p/{i}": html(*(f"/p/{child}" for child in range(3 * i + 1, 3 * i + 4) if child < pages))
        for i in range(pages)
    }
    routes["/"] = html("/p/0", "/gone")
    return routes


def held_site(pages: int, release: threading.Event) -> dict[str, Route]:
    """:func:`site` whose ``/gone`` answers its 404 only once ``release`` is set: the crawl
    cannot finish before Prometheus scraped its workers (Prometheus takes its first scrape
    seconds after it starts, which a crawl this small may outlast)."""

    def gone(path: str) -> None:
        release.wait(HOLD_TIMEOUT)

    return {**site(pages), "/gone": gone}


def wait_for_scrapes(
    prometheus: PrometheusServer, workers: list[subprocess.Popen], timeout: float
) -> None:
    """Wait until Prometheus scraped each of the ``workers`` successfully
    :data:`SCRAPES_WHILE_HELD` times (its own ``up`` series, not the workers' figures)."""
    deadline = time.monotonic() + timeout
    scraped: dict = {}
    while time.monotonic() < deadline:
        scraped = prometheus.query(f'sum_over_time(up{{job="{JOB}"}}[{WHOLE_CRAWL}])')
        if len(scraped) == len(workers) and min(scraped.values()) >= SCRAPES_WHILE_HELD:
            return
        time.sleep(0.2)
    exited = {worker.pid: worker.poll() for worker in workers}
    raise AssertionError(
        f"Prometheus did not scrape the {len(workers)} workers in {timeout} s: successful "
        f"scrapes {scraped}, exit codes {exited}, targets {prometheus.api('targets')}"
    )


def scrape(port: int) -> str | None:
    """A worker's /metrics, or None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return answer.read().decode()
    except (urllib.error.URLError, OSError):
        return None


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def exported_names(text: str) -> set[str]:
    """The names a query can use of an exposition: every family's samples' names, also for a
    family with no sample yet (its ``# TYPE`` line)."""
    names = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ("_total",), "summary": ("_count", "_sum")}.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names


def frontier(redis_url: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRAPY, "frontier", "site", *options, "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_worker(start_url: str, store: Path, redis_url: str, port: int) -> subprocess.Popen:
    """A worker of the shared crawl serving its metrics on ``port``."""
    command = site_crawl_command(
        start_url, store,
        "-s", f"REDIS_URL={redis_url}", "-s", f"METRICS_PORT={port}",
        "-s", f"METRICS_LINGER={LINGER}", "-s", "CONCURRENT_REQUESTS=2",
        "-s", "FRONTIER_STATUS_INTERVAL=0.5",
    )  # fmt: skip
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


@dataclass
class ScrapedCrawl:
    """A finished two-worker crawl that a real Prometheus scraped."""

    prometheus: PrometheusServer
    served: list[str]
    #: One worker's /metrics while the crawl ran.
    live: str
    #: ``scrapy frontier --json`` and ``--metrics`` after the crawl.
    status: dict
    crawl_metrics: str


@pytest.fixture(scope="module")
def scraped_crawl(
    redis_bloom_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ScrapedCrawl]:
    with redis_bloom_server.client() as client:
        client.flushall()
    redis_url = redis_bloom_server.url
    store = tmp_path_factory.mktemp("metrics") / "store.sqlite"
    ports = [free_port(), free_port()]
    prometheus = PrometheusServer([f"127.0.0.1:{port}" for port in ports], [RULES], JOB)
    try:
        prometheus.start()
    except ServiceUnavailable as exc:
        prometheus.close()
        pytest.fail(f"cannot start Prometheus: {exc}", pytrace=False)
    try:
        release = threading.Event()
        with TestServer(held_site(60, release), delay=0.2) as server:
            workers = [start_worker(f"{server.url}/", store, redis_url, port) for port in ports]
            try:
                live = None
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    live = scrape(ports[0])
                    if live and samples(live).get(("bloom_frontier_crawl_leased_requests",
                                                   (("crawl", "site"),)), 0) > 0:  # fmt: skip
                        break
                    time.sleep(0.2)
                assert live is not None, "the first worker never served /metrics"
                wait_for_scrapes(prometheus, workers, HOLD_TIMEOUT)
                release.set()
                for worker in workers:
                    _, stderr = worker.communicate(timeout=180)
                    assert worker.returncode == 0, stderr[-3000:]
            finally:
                release.set()
                for worker in workers:
                    worker.kill()
            served = server.paths()
        status = json.loads(frontier(redis_url, "--json").stdout)
        crawl_metrics = frontier(redis_url, "--metrics")
        assert crawl_metrics.returncode == 0, crawl_metrics.stderr
        yield ScrapedCrawl(prometheus, served, live, status, crawl_metrics.stdout)
    finally:
        prometheus.close()


def whole_crawl_sum(prometheus: PrometheusServer, metric: str, by: str = "") -> float:
    """The sum over the workers of ``metric``'s last value (its highest: counters)."""
    return prometheus.scalar(f"sum(max_over_time({metric}[{WHOLE_CRAWL}]){by})")


def test_prometheus_adds_the_workers_pages_up_to_what_the_site_served(
    scraped_crawl: ScrapedCrawl,
) -> None:
    prometheus, served = scraped_crawl.prometheus, scraped_crawl.served
    per_worker = prometheus.query(
        f"sum by (instance) (max_over_time(bloom_frontier_pages_fetched_total[{WHOLE_CRAWL}]))"
    )
    assert len(per_worker) == 2 and all(pages > 0 for pages in per_worker.values()), per_worker
    fetched = whole_crawl_sum(prometheus, "bloom_frontier_pages_fetched_total")
    copies = whole_crawl_sum(prometheus, "bloom_frontier_robotstxt_shared_copies_total")
    assert fetched - copies == len(served)
    by_status = prometheus.query(
        f"sum by (status) (max_over_time(bloom_frontier_pages_fetched_total[{WHOLE_CRAWL}]))"
    )
    assert {dict(labels)["status"]: count for labels, count in by_status.items()} == {
        "200": len(served) - 1 + copies,
        "404": 1,  # /gone
    }
    pages = [path for path in served if path != "/robots.txt"]
    assert whole_crawl_sum(prometheus, "bloom_frontier_requests_leased_total") == len(pages)
    assert whole_crawl_sum(prometheus, "bloom_frontier_store_commit_seconds_count") > 0


def test_prometheus_reads_the_crawl_wide_view_from_the_workers(
    scraped_crawl: ScrapedCrawl,
) -> None:
    """Every worker reports the crawl-wide figures: ``max`` reads them once, and the last
    ones are the crawl's totals, as ``scrapy frontier --json`` gives them."""
    prometheus, status = scraped_crawl.prometheus, scraped_crawl.status
    last = prometheus.scalar(
        f'max(max_over_time(bloom_frontier_crawl_pages_total{{crawl="site"}}[{WHOLE_CRAWL}]))'
    )
    assert last == status["pages"] > 0
    keys = prometheus.scalar(f"max(max_over_time(bloom_frontier_seen_filter_keys[{WHOLE_CRAWL}]))")
    assert keys == status["seen_keys"] == 62  # /, /gone and /p/0 ... /p/59
    workers = prometheus.scalar(
        f"max(max_over_time(bloom_frontier_crawl_workers_alive[{WHOLE_CRAWL}]))"
    )
    assert workers == 2


def test_the_alerting_rules_load_and_are_evaluated_in_prometheus(
    scraped_crawl: ScrapedCrawl,
) -> None:
    groups = scraped_crawl.prometheus.api("rules")["groups"]
    rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(rules) == {
        "BloomFrontierCrawlStalled",
        "BloomFrontierFilterOverErrorBudget",
        "BloomFrontierQuarantineGrowing",
        "BloomFrontierWorkerGone",
    }
    assert all(rule["health"] == "ok" for rule in rules.values()), rules
    # The workers of the finished crawl exited: their targets are down.
    assert rules["BloomFrontierWorkerGone"]["state"] in {"pending", "firing"}
    assert rules["BloomFrontierCrawlStalled"]["state"] == "inactive"


def test_frontier_metrics_prints_the_crawl_wide_view(scraped_crawl: ScrapedCrawl) -> None:
    found = samples(scraped_crawl.crawl_metrics)
    status = scraped_crawl.status
    crawl = (("crawl", "site"),)
    assert found[("bloom_frontier_crawl_pages_total", crawl)] == status["pages"]
    assert found[("bloom_frontier_crawl_finished", crawl)] == 1
    assert found[("bloom_frontier_crawl_queued_requests", crawl)] == 0
    assert found[("bloom_frontier_seen_filter_keys", crawl)] == status["seen_keys"]
    assert found[("bloom_frontier_seen_filter_error_budget", crawl)] == 0.001
    assert found[("bloom_frontier_redis_up", ())] == 1


def promql_names(expression: str) -> set[str]:
    """The metric names an expression reads (label names, functions and keywords left out)."""
    without_strings = re.sub(r'"[^"]*"', '""', expression)
    without_labels = re.sub(r"\{[^}]*\}", "", without_strings)
    without_grouping = re.sub(r"\b(?:by|on|without|ignoring)\s*\([^)]*\)", "", without_labels)
    without_ranges = re.sub(r"\[[^\]]*\]", "", without_grouping)
    names = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()", without_ranges))
    return names - {"and", "or", "unless", "bool", "offset"}


def dashboard_and_rule_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    expressions += re.findall(r"expr: (?:\|\n)?((?:.+\n)+?)\s+for:", RULES.read_text())
    return {name for expression in expressions for name in promql_names(expression)}


def test_the_dashboard_and_the_rules_name_only_exported_metrics(
    scraped_crawl: ScrapedCrawl,
) -> None:
    named = dashboard_and_rule_names()
    assert {"bloom_frontier_pages_fetched_total", "bloom_frontier_store_commit_seconds_sum"} <= (
        named
    )
    exported = exported_names(scraped_crawl.live)
    assert named - exported - PROMETHEUS_OWN == set()


def test_every_exported_metric_and_setting_is_documented(scraped_crawl: ScrapedCrawl) -> None:
    docs = (ROOT / "docs" / "metrics.md").read_text()
    families = {family.name for family in text_string_to_metric_families(scraped_crawl.live)}
    for name in sorted(name for name in families if name.startswith("bloom_frontier_")):
        assert f"`{name}" in docs, name
    for setting in ("METRICS_PORT", "METRICS_ADDRESS", "METRICS_LINGER"):
        assert f"`{setting}`" in docs, setting


def test_promtool_checks_the_rules_and_their_unit_tests() -> None:
    promtool = str(debian_tool("promtool"))
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_an_embedded_crawl_serves_its_pages_backoffs_and_filter(tmp_path: Path) -> None:
    """No Redis: the worker's own figures, its seen filter's, and a 429 counted under its
    host class; the endpoint serves the last of them after the spider closed."""
    port = free_port()
    routes = site(8)
    routes["/p/3"] = Page("busy", status=429, headers={"Retry-After": "1"})
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    with TestServer(routes) as server:
        crawl = subprocess.Popen(
            site_crawl_command(f"{server.url}/", tmp_path / "store.sqlite",
                               "-s", f"METRICS_PORT={port}", "-s", "METRICS_LINGER=3"),
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        last = None
        try:
            while crawl.poll() is None:
                last = scrape(port) or last
                time.sleep(0.2)
        finally:
            crawl.kill()
        _, stderr = crawl.communicate()
        assert crawl.returncode == 0, stderr[-3000:]
        served = server.paths()
    assert last is not None
    found = samples(last)
    fetched = {
        labels: count for (name, labels), count in found.items()
        if name == "bloom_frontier_pages_fetched_total"
    }  # fmt: skip
    assert sum(fetched.values()) == len(served)
    assert fetched[(("status", "429"),)] == served.count("/p/3") > 1  # retried
    assert found[("bloom_frontier_backoff_pauses_total", (("host_class", "other"),))] >= 1
    assert found[("bloom_frontier_backoff_pauses_total", (("host_class", "shortener"),))] == 0
    assert found[("bloom_frontier_seen_filter_keys", (("crawl", "site"),))] == 10  # /, /gone, /p/*
    assert ("bloom_frontier_redis_up", ()) not in found


def crawl_without(module: str | None, tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    """``scrapy crawl site`` (embedded) with ``options``, ``module`` impossible to import."""
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    if module:
        (tmp_path / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
        env["PYTHONPATH"] = str(tmp_path)
    return subprocess.run(
        site_crawl_command("http://127.0.0.1:1/", tmp_path / "store.sqlite", *options),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: "), lines[0]
    assert done.returncode == 2
    return lines[0]


def test_a_metrics_port_without_the_extra_is_one_error_line(tmp_path: Path) -> None:
    port = free_port()
    line = one_error_line(
        crawl_without("prometheus_client", tmp_path, "-s", f"METRICS_PORT={port}")
    )
    assert FIX in line and "METRICS_PORT" in line


def test_frontier_metrics_without_the_extra_is_one_error_line(
    tmp_path: Path, redis_url: str
) -> None:
    (tmp_path / "sitecustomize.py").write_text(
        'import sys\nsys.modules["prometheus_client"] = None\n'
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [SCRAPY, "frontier", "site", "--metrics", "-s", f"REDIS_URL={redis_url}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert FIX in one_error_line(done)


def test_no_metrics_port_needs_no_extra(tmp_path: Path) -> None:
    """The add-on installs the extension; without METRICS_PORT it imports nothing of
    prometheus_client."""
    done = crawl_without("prometheus_client", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_taken_or_bad_metrics_port_is_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_error_line(crawl_without(None, tmp_path, "-s", f"METRICS_PORT={port}"))
    assert f"cannot serve metrics at http://127.0.0.1:{port}/metrics" in line
    line = one_error_line(crawl_without(None, tmp_path, "-s", "METRICS_PORT=metrics"))
    assert "METRICS_PORT must be unset, or a port from 1 to 65535" in line  # the settings check
    line = one_error_line(crawl_without(None, tmp_path, "-s", "METRICS_PORT=1", "-s",
                                        "METRICS_ADDRESS=192.0.2.1"))  # fmt: skip
    assert "cannot serve metrics at http://192.0.2.1:1/metrics" in line


def test_the_metrics_modules_examples() -> None:
    assert doctest.testmod(bloom_frontier.metrics).failed == 0
