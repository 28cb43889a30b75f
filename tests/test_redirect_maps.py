"""Redirect maps proven in the servers they are written for.

A real crawl of :mod:`tests.awkward_site` is exported by ``scrapy redirects`` in every format;
the nginx and Apache exports are loaded into Debian's nginx and Apache (one of each for the
module, on free loopback ports), which must accept them and answer every source with one
redirect straight to its target, with its status, and leave everything else alone. The audit
report is rendered in headless Chromium: it names the page linking to each source (the
stored referrer of the chain's first request) and shows a spiral as one row.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.defaults import REDIRECT_MAX_HOPS
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import FETCHED, PageRecord
from bloom_frontier.pipelines.writer import StoreWriter
from bloom_frontier.redirectmap.matching import dropped_param_pattern
from tests.awkward_site import EXPECTED, NOT_ENTRIES, SECTION, SPIRAL, VARIANTS, awkward_site
from tests.httpserver import TestServer
from tests.record_builders import chain, hop
from tests.redirect_server import crawl_site, scrapy
from tests.services import debian_tool
from tests.webservers import ApacheServer, ConfigRefused, NginxServer, _WebServer, header_lines


@dataclass
class Site:
    store_url: str
    origin: str
    host: str  # the Host header of the crawled site


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    tmp = tmp_path_factory.mktemp("awkward")
    server = TestServer(awkward_site())
    store_url = f"sqlite:///{tmp / 'store.sqlite'}"
    with server:
        crawl_site(f"{server.url}/", store_url, tmp / "spy.log")
    return Site(store_url, server.url, f"127.0.0.1:{server.port}")


def export(store_url: str, fmt: str, *options: str) -> str:
    result = scrapy("redirects", "-s", f"STORE_URL={store_url}", "--format", fmt, *options)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def jsonl(store_url: str, *options: str) -> list[dict]:
    return [json.loads(line) for line in export(store_url, "jsonl", *options).splitlines()]


def assert_redirects(
    server: _WebServer, host: str, expected: dict[str, tuple[int, str]], not_redirected: list[str]
) -> int:
    """Each request answers one redirect straight to its target (which itself is not
    redirected), everything in ``not_redirected`` passes through; return requests checked."""
    checked = 0
    for path, (status, target) in expected.items():
        response = server.get(path, host)
        assert (response.status, response.getheader("Location")) == (status, target), path
        target_path = target.split("://", 1)[-1].partition("/")[1:]
        target_host = target.split("://", 1)[-1].partition("/")[0]
        again = server.get("".join(target_path), target_host)
        assert again.status == 404, f"{target} redirects again"
        checked += 1
    for path in not_redirected:
        assert server.get(path, host).status == 404, path
        checked += 1
    return checked


def site_expectations(site: Site, permanent_only: bool = False) -> dict[str, tuple[int, str]]:
    wanted = {**EXPECTED, **{v: EXPECTED[s] for v, s in VARIANTS.items()}}
    return {
        path: (status, site.origin + target)
        for path, (status, target) in wanted.items()
        if not permanent_only or status in (301, 308)
    }


def test_rows_follow_the_stated_semantics(site: Site) -> None:
    rows = {row["source"].removeprefix(site.origin): row for row in jsonl(site.store_url)}
    for path, (status, target) in EXPECTED.items():
        row = rows[path]
        assert (row["entry"], row["status"], row["target"]) == (True, status, site.origin + target)
    assert rows["/mix/1"]["hop_statuses"] == "301 308 302 307"
    assert rows["/perm/a"]["hop_statuses"] == "301 308"  # joined /perm/1's chain half-way
    skips = {path: rows[path]["skip"] for path in NOT_ENTRIES if path in rows}
    assert skips == {
        "/loop/x": "loop",
        "/loop/y": "loop",
        "/old/meta": "blocked",
        "/old/two": "blocked",
        "/old/two/next": "blocked",
        "/old/home": "flagged",
        "/old/gone": "final-status-404",
    }
    assert all(rows[path]["target"] is None for path in ("/old/meta", "/old/two", "/loop/x"))
    assert rows["/old/home"]["flag"] == "soft-404:homepage"
    assert sum(row["entry"] for row in rows.values()) == len(EXPECTED)


def test_nginx_serves_every_source_straight_to_its_target(site: Site, nginx: NginxServer) -> None:
    text = export(site.store_url, "nginx")
    assert header_lines(text, "server") == [
        f"if ($redirect_{s}) {{ return {s} $redirect_{s}; }}" for s in (301, 302, 307, 308)
    ]
    # The 300-character key needs more than nginx's default bucket size: the header says so,
    # and without its two lines nginx refuses the file.
    assert header_lines(text, "http")[0] == "map_hash_bucket_size 512;"
    with pytest.raises(ConfigRefused, match="map_hash_bucket_size"):
        nginx.load(text.replace("# http: ", "# "))
    nginx.load(text)
    checked = assert_redirects(nginx, site.host, site_expectations(site), NOT_ENTRIES)
    assert checked == len(EXPECTED) + len(VARIANTS) + len(NOT_ENTRIES)
    # Case twins and the query source are regex entries; the count is stated.
    assert "# 20 string keys, 4 regex entries (cap 1000;" in text


#: The ``server {}`` lines docs/redirect-maps.md tells a user to paste.
DOCUMENTED_SERVER_BLOCK = re.findall(
    r"^    # server: (if .*})$",
    (Path(__file__).parents[1] / "docs" / "redirect-maps.md").read_text(encoding="utf-8"),
    re.MULTILINE,
)


def bulk_statuses(store_url: str, *options: str) -> set[int]:
    rows = list(csv.DictReader(io.StringIO(export(store_url, "bulk", *options))))
    return {int(row["status"]) for row in rows}


@pytest.mark.parametrize("options", [(), ("--permanent-only",)])
def test_nginx_documented_server_block_works_without_every_status(
    two_hosts: str, nginx: NginxServer, options: tuple[str, ...]
) -> None:
    """The same server {} lines, pasted once, pass ``nginx -t`` with an export lacking some
    statuses (no 307; permanent only: no 302 either) and still redirect its sources."""
    assert len(DOCUMENTED_SERVER_BLOCK) == 4
    missing = {301, 302, 307, 308} - bulk_statuses(two_hosts, *options)
    assert missing >= ({302, 307} if options else {307})
    text = export(two_hosts, "nginx", *options)
    assert header_lines(text, "server") == DOCUMENTED_SERVER_BLOCK
    nginx.load(text)
    for (host, path), (status, target) in TWO_HOSTS_EXPECTED.items():
        if status not in missing:
            assert_redirects(nginx, host, {path: (status, target)}, [])


def test_nginx_regex_cap_reports_what_it_leaves_out(site: Site) -> None:
    result = scrapy(
        "redirects", "-s", f"STORE_URL={site.store_url}", "--format", "nginx", "--max-regex", "1"
    )
    assert result.returncode == 0, result.stderr
    assert "redirects: 1 regex entries written (cap 1)" in result.stderr
    # Three case twins and one query source wanted a regex: one got it, the others are said.
    lines = result.stderr.splitlines()
    case_twins = [line for line in lines if "needs a case-sensitive regex entry" in line]
    query_only = [line for line in lines if "exact query order only" in line]
    assert len(case_twins) + len(query_only) == 3
    assert len(case_twins) >= 2


def test_apache_serves_every_source_straight_to_its_target(
    site: Site, apache: ApacheServer
) -> None:
    text = export(site.store_url, "apache")
    assert "# 1 sources have %2F in their path" in text
    assert "AllowEncodedSlashes On" in text
    assert "[R=301,NE,QSD,UnsafeAllow3F,L]" in text  # targets with a query
    assert text.count(dropped_param_pattern()) == 1  # stated once, not per rule
    apache.load(text)
    checked = assert_redirects(apache, site.host, site_expectations(site), NOT_ENTRIES)
    assert checked == len(EXPECTED) + len(VARIANTS) + len(NOT_ENTRIES)


@pytest.mark.parametrize("server_name", ["nginx", "apache"])
def test_permanent_only_maps_leave_temporary_sources_out(
    site: Site, server_name: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue(server_name)
    server.load(export(site.store_url, server_name, "--permanent-only"))
    permanent = site_expectations(site, permanent_only=True)
    temporary = [path for path in site_expectations(site) if path not in permanent]
    assert {"/mix/1", "/mix/4", "/old/50%25off"} <= set(temporary)
    assert_redirects(server, site.host, permanent, temporary)


TWO_HOSTS_TARGETS = {
    "http://a.example/new/a": 200,
    "http://b.example/new/b": 200,
    "http://a.example/new/c": 200,
    "http://[::1]/new/v6": 200,
}


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two hosts sharing paths, a shortener hop, query variants, an IPv6 literal host."""
    store_url = f"sqlite:///{tmp_path_factory.mktemp('hosts') / 'store.sqlite'}"
    store = StoreWriter.from_url(store_url)
    for one in (
        chain("1", FETCHED, hop("http://a.example/old/dup", "http://a.example/new/a", 301)),
        chain("2", FETCHED, hop("http://b.example/old/dup", "http://b.example/new/b", 302)),
        chain(
            "3",
            FETCHED,
            hop("http://bit.ly/x1", "http://a.example/old/c", 301),
            hop("http://a.example/old/c", "http://a.example/new/c?utm_source=x", 308),
        ),
        chain("4", FETCHED, hop("http://A.example/old/p?b=2&a=1", "http://a.example/new/a", 301)),
        chain("6", FETCHED, hop("http://[::1]:8080/old/v6", "http://[::1]/new/v6", 308)),
        # The same page to the crawl: one entry serves both.
        chain(
            "5", FETCHED, hop("http://a.example/old/p?a=1&b=2&gclid=z", "http://a.example/new/a")
        ),
    ):
        store.add_chain(one)
    for url, status in TWO_HOSTS_TARGETS.items():
        store.add_page(PageRecord(url, url, dedupe_key(url), status))
    url = "http://a.example/new/c?utm_source=x"
    store.add_page(PageRecord(url, url, dedupe_key(url), 200))
    store.close()
    return store_url


TWO_HOSTS_EXPECTED = {
    ("a.example", "/old/dup"): (301, "http://a.example/new/a"),
    ("b.example", "/old/dup"): (302, "http://b.example/new/b"),
    ("a.example", "/old/c"): (308, "http://a.example/new/c"),
    ("a.example", "/old/p?a=1&b=2"): (301, "http://a.example/new/a"),
    ("A.EXAMPLE", "/old/p?b=2&a=1&utm_source=z"): (301, "http://a.example/new/a"),
    ("[::1]:8080", "/old/v6"): (308, "http://[::1]/new/v6"),
}


@pytest.mark.parametrize("server_name", ["nginx", "apache"])
def test_two_hosts_sharing_paths(
    two_hosts: str, server_name: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue(server_name)
    server.load(export(two_hosts, server_name))
    for (host, path), expected in TWO_HOSTS_EXPECTED.items():
        assert_redirects(server, host, {path: expected}, [])
    # The shortener's hop is no entry; another host's path is not redirected.
    assert_redirects(server, "bit.ly", {}, ["/x1"])
    assert_redirects(server, "c.example", {}, ["/old/dup"])
    rows = {row["source"]: row for row in jsonl(two_hosts)}
    assert rows["http://bit.ly/x1"]["skip"] == "shortener"
    assert export(two_hosts, "bulk").count("/old/p?") == 1
    assert 'data-category="variants">1<' in export(two_hosts, "html")


def test_bulk_holds_exactly_the_entries(site: Site) -> None:
    table = list(csv.reader(io.StringIO(export(site.store_url, "bulk"))))
    assert table[0] == ["source", "target", "status"]
    got = {
        source.removeprefix(site.origin): (int(status), target)
        for source, target, status in table[1:]
    }
    assert got == {
        path: (status, site.origin + target) for path, (status, target) in EXPECTED.items()
    }


def export_counts(rows: list[dict], hints: list[dict]) -> dict[str, int]:
    """Each report category counted from the csv/jsonl exports."""
    statuses = [[int(s) for s in row["hop_statuses"].split()] for row in rows]
    keys = Counter(row["source_key"] for row in rows)
    return {
        "multi-hop": sum(r["outcome"] == "fetched" and r["hops"] > 1 for r in rows),
        "temporary-inside-permanent": sum(
            bool(set(s) & {301, 308}) and bool(set(s) - {301, 308}) for s in statuses
        ),
        "loops": sum(r["outcome"] == "loop" for r in rows),
        "blocked": sum(r["outcome"] == "blocked" for r in rows),
        "error-end": sum((r["final_status"] or 0) >= 400 for r in rows),
        "soft-404": sum(bool(r["flag"]) for r in rows),
        "dead-end": sum(r["outcome"] in ("too-many-hops", "error", "unresolved") for r in rows),
        "variants": sum(count > 1 for count in keys.values()),
        "canonical": sum(bool(h["problem"]) for h in hints),
    }


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    command = [
        str(debian_tool("chromium")),
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        f"--user-data-dir={tmp / 'profile'}", f"--log-net-log={tmp / 'net.json'}", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


#: Chromium's own services (time, updates, accounts): requested by the browser, not the page.
BROWSER_SERVICES = re.compile(r"^https?://[^/]*\.(?:google\.com|googleapis\.com|gvt1\.com)/")
#: Appended to a copy of the report: lists every resource the page fetched, once loaded.
RESOURCE_PROBE = (
    "<script>addEventListener('load', () => { document.documentElement.dataset.resources = "
    "performance.getEntriesByType('resource').map(e => e.name).join(' ') + '|'; });</script>"
)


def test_audit_report_renders_offline_with_the_export_counts(site: Site, tmp_path: Path) -> None:
    report = export(site.store_url, "html")
    assert not re.search(r"(?:src|href)=\"(?!#)|url\(|@import", report.split("<body", 1)[1])
    page = tmp_path / "report.html"
    page.write_text(report.replace("</body>", RESOURCE_PROBE + "</body>"), encoding="utf-8")
    result = chromium("--dump-dom", page.as_uri(), tmp=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'data-resources="|"' in result.stdout  # the probe ran: nothing was fetched
    requested = set(re.findall(r'"url":"([^"]+)"', (tmp_path / "net.json").read_text()))
    assert {url for url in requested if not BROWSER_SERVICES.match(url)} <= {page.as_uri()}
    shown = {k: int(v) for k, v in re.findall(r'data-category="([\w-]+)">(\d+)<', result.stdout)}
    canonicals = scrapy("canonicals", "-s", f"STORE_URL={site.store_url}").stdout
    hints = [json.loads(line) for line in canonicals.splitlines()]
    expected = export_counts(jsonl(site.store_url), hints)
    assert shown == expected
    assert (expected["loops"], expected["blocked"], expected["error-end"]) == (2, 3, 1)
    assert (expected["soft-404"], expected["canonical"]) == (1, 1)
    assert expected["multi-hop"] >= 5 and expected["variants"] == 0
    shot = chromium("--screenshot=" + str(tmp_path / "report.png"), "--window-size=1200,1800",
                    page.as_uri(), tmp=tmp_path)  # fmt: skip
    assert shot.returncode == 0 and (tmp_path / "report.png").stat().st_size > 10_000


def test_audit_report_names_hops_reasons_and_fixes(site: Site) -> None:
    """Each listed row says where it goes or why nowhere, with its hops' URLs; the header
    names the site and dates; a canonical pointing at a redirect names the URL to use."""
    report = export(site.store_url, "html")
    assert "<h1>Redirect audit: 127.0.0.1</h1>" in report
    assert re.search(r"recorded \d{4}-\d\d-\d\d \d\d:\d\d UTC .*report written", report)
    assert '<td class="url"></td>' not in report  # every source, linking page and target
    rows = {row["source"]: row for row in jsonl(site.store_url)}
    loop = rows[site.origin + "/loop/x"]
    assert f"loop: comes back to {html.escape(site.origin)}/loop/" in report
    assert loop["target"] is None
    mix = rows[site.origin + "/mix/1"]
    assert f"308 \u2192 {html.escape(site.origin)}/mix/3" in report, mix
    canonicals = scrapy("canonicals", "-s", f"STORE_URL={site.store_url}").stdout
    hints = [json.loads(line) for line in canonicals.splitlines()]
    (hint,) = [hint for hint in hints if hint["problem"] == "redirects"]
    use = rows[hint["canonical"]]["target"]
    canonical_section = report.split('id="canonical"')[1]
    assert f'<td class="url">{html.escape(use)}</td>' in canonical_section
    assert "<summary>1 row</summary>" in report and "1 rows" not in report


#: Appended to a copy of the report: sorts the chains-to-flatten table by status twice
#: (descending), then filters every table on "mix/1", and writes down what it saw.
SORT_FILTER_PROBE = """<script>addEventListener('load', () => {
  const table = document.querySelector('#multi-hop table');
  const column = Array.from(table.tHead.rows[0].cells).findIndex(th => th.textContent === 'status');
  const status = table.tHead.rows[0].cells[column];
  status.click(); status.click();
  const seen = document.documentElement.dataset;
  seen.statuses = Array.from(table.tBodies[0].rows, row => row.cells[column].textContent).join(' ');
  const filter = document.getElementById('filter');
  filter.value = 'MIX/1';
  filter.dispatchEvent(new Event('input'));
  const shown = Array.from(document.querySelectorAll('tbody tr')).filter(row => !row.hidden);
  seen.shown = shown.length + ' of ' + document.querySelectorAll('tbody tr').length;
  seen.allMatch = String(shown.every(row => row.textContent.includes('mix/1')));
});</script>"""


def test_audit_report_sorts_and_filters_offline(site: Site, tmp_path: Path) -> None:
    report = export(site.store_url, "html")
    page = tmp_path / "report.html"
    page.write_text(report.replace("</body>", SORT_FILTER_PROBE + "</body>"), encoding="utf-8")
    result = chromium("--dump-dom", page.as_uri(), tmp=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    statuses = [int(s) for s in re.search(r'data-statuses="([\d ]+)"', result.stdout)[1].split()]
    assert len(statuses) >= 5 and statuses == sorted(statuses, reverse=True)
    assert len(set(statuses)) > 1
    shown, total = map(int, re.search(r'data-shown="(\d+) of (\d+)"', result.stdout).groups())
    assert 0 < shown < total
    assert 'data-all-match="true"' in result.stdout


def test_store_and_report_name_the_page_linking_to_a_chain(site: Site) -> None:
    """The referrer of a chain's first request is stored: the store, the exports and the
    report name the page whose link started it (the spiral is linked from the section page
    only), and a source no page linked to says how it was reached."""
    reader = StoreReader.from_url(site.store_url)
    referrers = {chain.start_url: chain.referrer for chain in reader.chains()}
    reader.close()
    home, section = site.origin + "/", site.origin + SECTION
    mix1 = site.origin + "/mix/1"
    assert (referrers[site.origin + SPIRAL], referrers[mix1]) == (section, home)
    rows = {row["source"]: row for row in jsonl(site.store_url)}
    assert (rows[site.origin + SPIRAL]["referrer"], rows[mix1]["referrer"]) == (section, home)
    assert rows[site.origin + "/mix/2"]["referrer"] is None  # only reached by redirect
    table = csv.DictReader(io.StringIO(export(site.store_url, "csv")))
    assert {row["source"]: row["referrer"] for row in table}[mix1] == home
    report = export(site.store_url, "html")
    flatten = report.split('id="multi-hop"')[1].split("</section>")[0]
    start = f'<tr><td class="url">{html.escape(mix1)}</td><td class="url">{html.escape(home)}</td>'
    assert start in flatten
    assert f'<td class="url">no link: reached by redirect from {html.escape(mix1)}</td>' in flatten


#: Appended to a copy of the report: opens the dead ends, reads the spiral's rows as shown
#: (innerText: folded text is not rendered), unfolds its sources, then filters on one of
#: them.
SPIRAL_PROBE = """<script>addEventListener('load', () => {
  const seen = document.documentElement.dataset;
  document.querySelector('#dead-end > details').open = true;
  const rows = Array.from(document.querySelectorAll('#dead-end tbody tr'));
  const spiral = rows.filter(row => row.textContent.includes('spiral?n='));
  seen.spiralRows = String(spiral.length);
  const row = spiral[0];
  seen.folded = row.cells[0].innerText;
  seen.cells = Array.from(row.cells).slice(1, 3).map(cell => cell.innerText).join(' | ');
  row.querySelector('details').open = true;
  seen.unfolded = row.cells[0].innerText;
  row.querySelector('details').open = false;
  const filter = document.getElementById('filter');
  filter.value = 'spiral?n=7';
  filter.dispatchEvent(new Event('input'));
  const shown = Array.from(document.querySelectorAll('tbody tr')).filter(row => !row.hidden);
  seen.filtered = String(shown.length === 1 && shown[0] === row);
  seen.filteredOpen = String(row.querySelector('details').open);
});</script>"""


def test_audit_report_shows_a_spiral_as_one_row(site: Site, tmp_path: Path) -> None:
    """The spiral's sources (one export row per hop) are one row of the report, in Chromium:
    its pattern, its length, why it has no target and the page linking to it; its sources
    folded under it, found by the filter."""
    spiral = [row for row in jsonl(site.store_url) if "/spiral?n=" in row["source"]]
    assert len(spiral) == REDIRECT_MAX_HOPS
    assert {row["outcome"] for row in spiral} == {"too-many-hops"}
    report = export(site.store_url, "html")
    assert f'data-category="dead-end">{len(spiral)}<' in report  # the export's count
    assert f"<summary>1 row for {len(spiral)} sources (each spiral is one row)</summary>" in report
    page = tmp_path / "report.html"
    page.write_text(report.replace("</body>", SPIRAL_PROBE + "</body>"), encoding="utf-8")
    result = chromium("--dump-dom", page.as_uri(), tmp=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = {
        name: html.unescape(value)
        for name, value in re.findall(
            r'data-([a-z-]+)="([^"]*)"', re.search(r"<html[^>]*>", result.stdout)[0]
        )
    }
    pattern = f"{site.origin}/spiral?n=*"
    assert seen["spiral-rows"] == "1", seen
    assert seen["folded"].split("\n")[0] == pattern and "?n=5" not in seen["folded"], seen
    assert f"spiral: {len(spiral)} sources" in seen["folded"]
    unfolded = {line for line in seen["unfolded"].splitlines() if "?n=" in line and "*" not in line}
    assert unfolded == {row["source"] for row in spiral}
    linked, why = seen["cells"].split(" | ")
    assert linked == site.origin + SECTION
    assert why.startswith(f"spiral {pattern}: every hop leads to a new URL")
    assert f"after {REDIRECT_MAX_HOPS} hops" in why and "no target" in why
    assert (seen["filtered"], seen["filtered-open"]) == ("true", "true")
