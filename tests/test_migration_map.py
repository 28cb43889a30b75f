"""``scrapy migration-map``: the matcher's answers written as a migration engineer deploys and
reviews them.

The command's own work is tested against answers made here, through a matcher passed in
(:func:`run_map` runs the command's ``run`` as ``scrapy`` does, in this process) and two real
record stores: the server maps loaded into real nginx and Apache and requested, the review
page rendered in Chromium, the review CSV edited and fed back. The checks that come before
any matching (stores, options, a malformed review file) run ``scrapy migration-map`` as a
user does. The last test crawls two real sites and uses the project's matcher
(``bloom_frontier.migration.matching``), skipped where that module is not there yet.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from scrapy.cmdline import ScrapyArgumentParser
from scrapy.settings import Settings

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.commands.migration_map import Command
from bloom_frontier.defaults import with_defaults
from bloom_frontier.migration.answers import MigrationAnswer
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import PageRecord
from bloom_frontier.pipelines.writer import StoreWriter
from tests.httpserver import Page, TestServer, html
from tests.redirect_server import crawl_site, scrapy
from tests.test_redirect_maps import BROWSER_SERVICES, RESOURCE_PROBE, chromium
from tests.webservers import ApacheServer, NginxServer, _WebServer

OLD = "http://www.example.org"
NEW = "http://staging.example.org"

#: A crawled page's title as a matcher's reason may quote it: a formula and markup.
HOSTILE_TITLE = '=HYPERLINK("http://evil.example/") <img src="/x" onerror="alert(1)">'
#: The migration the tests' matcher answers: old path -> the answer's other fields.
MIGRATION: dict[str, dict] = {
    "/about.html": {"new": "/company/about/", "confidence": 1.0, "method": "exact"},
    "/blog/2019/launch.html": {
        "new": "/news/launch/", "confidence": 0.93, "method": "near-content",
    },
    "/docs/install.html": {"new": "/guide/install/", "confidence": 0.82, "method": "title"},
    "/docs/a.html": {"new": "/guide/ab/", "confidence": 0.95, "method": "merged"},
    "/docs/b.html": {
        "new": "/guide/ab/", "confidence": 0.94, "method": "merged", "reason": HOSTILE_TITLE,
    },
    "/product?id=3&lang=en": {"new": "/shop/widget/", "confidence": 0.97, "method": "exact"},
    "/caf%C3%A9.html": {"new": "/cafe/", "confidence": 0.99, "method": "near-content"},
    "/contact.php": {
        "new": "/contact/", "confidence": 0.71, "method": "ambiguous", "entry": False,
        "runner_up": "/support/contact/", "runner_up_confidence": 0.69,
        "reason": "two candidates within 0.05",
    },
    "/promo/2018.html": {
        "new": None, "confidence": 0.0, "method": "removed", "entry": False,
        "suggestion": "/promo/", "reason": "no page holds its content",
    },
    "/press/old.html": {
        "new": None, "confidence": 0.0, "method": "removed", "entry": False, "suggestion": "410",
    },
}  # fmt: skip
ENTRIES = {path: fields["new"] for path, fields in MIGRATION.items() if fields.get("entry", True)}
NOT_ENTRIES = [path for path in MIGRATION if path not in ENTRIES]
NEW_PAGES = sorted(
    {fields["new"] for fields in MIGRATION.values() if fields["new"]}
    | {"/promo/", "/support/contact/", "/guide/setup/", "/docs/install.html", "/Docs/A.html"}
)


def answers() -> list[MigrationAnswer]:
    """The matcher's answers for :data:`MIGRATION`, with URLs on the two hosts."""
    made = []
    for path, fields in MIGRATION.items():
        fields = dict(fields)
        for name in ("new", "runner_up", "suggestion"):
            if str(fields.get(name)).startswith("/"):
                fields[name] = NEW + fields[name]
        fields.setdefault("entry", True)
        made.append(MigrationAnswer(old=OLD + path, **fields))
    return made


def write_store(path: Path | str, urls: list[str], status: int = 200) -> str:
    """A record store at ``path`` (a SQLite file, or a store URL) holding a fetched page for
    each URL."""
    url = path if isinstance(path, str) else f"sqlite:///{path}"
    writer = StoreWriter.from_url(url)
    for page in urls:
        writer.add_page(PageRecord(page, page, dedupe_key(page), status))
    writer.close()
    return url


@dataclass
class Stores:
    old: str
    new: str


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    tmp = tmp_path_factory.mktemp("migration")
    return Stores(
        write_store(tmp / "old.sqlite", [OLD + path for path in MIGRATION]),
        write_store(tmp / "new.sqlite", [NEW + path for path in NEW_PAGES]),
    )


@dataclass
class Ran:
    code: int
    out: str
    err: str
    #: The page URLs of the stores the matcher was given: (old, new).
    matched: list[tuple[set[str], set[str]]] = field(default_factory=list)

    def jsonl(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines()]

    def bulk(self) -> dict[str, tuple[str, int]]:
        rows = csv.DictReader(io.StringIO(self.out))
        return {row["source"]: (row["target"], int(row["status"])) for row in rows}


def run_map(
    capsys: pytest.CaptureFixture[str],
    *args: str,
    made: Callable[[], list[MigrationAnswer]] = answers,
) -> Ran:
    """``scrapy migration-map ARGS`` in this process, as ``scrapy`` runs a command, with a
    matcher answering ``made()`` (and noting the stores it was given)."""
    command = Command()
    command.settings = with_defaults(Settings())
    parser = ScrapyArgumentParser(conflict_handler="resolve")
    command.add_options(parser)
    opts = parser.parse_args(list(args))
    ran = Ran(0, "", "")

    def matcher(old: StoreReader, new: StoreReader, progress: object) -> list[MigrationAnswer]:
        pages = [{str(page["fetch_url"]) for page in store.pages()} for store in (old, new)]
        ran.matched.append((pages[0], pages[1]))
        return made()

    command.matcher = matcher
    capsys.readouterr()
    command.run([], opts)
    captured = capsys.readouterr()
    ran.code, ran.out, ran.err = command.exitcode, captured.out, captured.err
    return ran


def test_jsonl_is_one_answer_per_old_document_from_the_two_stores(
    stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run_map(capsys, "--old", stores.old, "--new", stores.new)
    assert ran.code == 0, ran.err
    assert ran.matched == [({OLD + p for p in MIGRATION}, {NEW + p for p in NEW_PAGES})]
    assert ran.jsonl() == [answer.as_json() for answer in answers()]
    assert ran.err.splitlines()[-1] == (
        "migration-map: 10 old documents: 7 map entries (exact 2, near-content 2, merged 2, "
        "title 1), 2 removed, 1 ambiguous (for review), 0 not entries for another reason"
    )


def assert_served(
    server: _WebServer, expected: dict[str, str], not_redirected: list[str], status: int = 301
) -> None:
    """Each old path (requested on the old host) answers one redirect to its expected URL;
    the others are not redirected."""
    for path, target in expected.items():
        response = server.get(path, "www.example.org")
        assert (response.status, response.getheader("Location")) == (status, target), path
    for path in not_redirected:
        assert server.get(path, "www.example.org").status == 404, path


#: Requests for the same old pages as a browser or a crawler may spell them.
VARIANTS = {
    "/product?lang=en&id=3&utm_source=newsletter": "/shop/widget/",  # order, tracking
    "/caf%c3%a9.html": "/cafe/",  # the same decoded path
}


@pytest.mark.parametrize("server_name", ["nginx", "apache"])
def test_servers_send_each_entry_to_its_new_page_and_nothing_else(
    stores: Stores, server_name: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture
) -> None:
    server = request.getfixturevalue(server_name)
    ran = run_map(capsys, "--old", stores.old, "--new", stores.new, "--format", server_name)
    assert ran.code == 0, ran.err
    server.load(ran.out)
    expected = {path: NEW + target for path, target in ENTRIES.items()}
    expected |= {path: NEW + target for path, target in VARIANTS.items()}
    assert_served(server, expected, [*NOT_ENTRIES, "/docs/c.html"])


def test_bulk_holds_exactly_the_entries(stores: Stores, capsys: pytest.CaptureFixture) -> None:
    ran = run_map(capsys, "--old", stores.old, "--new", stores.new, "--format", "bulk")
    assert ran.code == 0, ran.err
    expected = {OLD + path: (NEW + target, 301) for path, target in ENTRIES.items()}
    assert ran.bulk() == expected


def test_min_confidence_leaves_the_less_confident_out_of_the_map(
    stores: Stores, capsys: pytest.CaptureFixture
) -> None:
    common = ("--old", stores.old, "--new", stores.new, "--min-confidence", "0.9")
    bulk = run_map(capsys, *common, "--format", "bulk").bulk()
    assert set(bulk) == {OLD + path for path in ENTRIES} - {OLD + "/docs/install.html"}
    rows = {row["old"]: row for row in run_map(capsys, *common).jsonl()}
    left = rows[OLD + "/docs/install.html"]
    assert left["entry"] is False and left["new"] == NEW + "/guide/install/"
    assert left["reason"].startswith("confidence 0.820 below --min-confidence 0.9")


def test_host_moves_the_targets_from_staging_to_the_deployed_host(
    stores: Stores, capsys: pytest.CaptureFixture
) -> None:
    common = ("--old", stores.old, "--new", stores.new, "--host", "https://www.example.org")
    bulk = run_map(capsys, *common, "--format", "bulk").bulk()
    assert bulk == {
        OLD + path: (f"https://www.example.org{target}", 301) for path, target in ENTRIES.items()
    }
    rows = {row["old"]: row for row in run_map(capsys, *common).jsonl()}
    contact = rows[OLD + "/contact.php"]
    assert contact["runner_up"] == "https://www.example.org/support/contact/"
    assert rows[OLD + "/promo/2018.html"]["suggestion"] == "https://www.example.org/promo/"
    assert rows[OLD + "/press/old.html"]["suggestion"] == "410"


def test_on_one_host_the_new_sites_pages_are_never_redirected(
    stores: Stores, capsys: pytest.CaptureFixture, nginx: NginxServer
) -> None:
    """On the same host, /docs/install.html is a page of the new site (another one): a
    redirect there would hide it, so it is left out of the map, with why; /Docs/A.html, a
    new page too, is a case twin of the old /docs/a.html, which nginx's case-insensitive
    keys would redirect as well."""
    common = ("--old", stores.old, "--new", stores.new, "--host", "www.example.org")
    bulk = run_map(capsys, *common, "--format", "bulk").bulk()
    assert set(bulk) == {OLD + path for path in ENTRIES} - {OLD + "/docs/install.html"}
    rows = {row["old"]: row for row in run_map(capsys, *common).jsonl()}
    reason = rows[OLD + "/docs/install.html"]["reason"]
    assert reason == "the new site has a page at this URL: a redirect would hide it"
    nginx.load(run_map(capsys, *common, "--format", "nginx").out)
    redirected = {"/docs/a.html": OLD + "/guide/ab/", "/about.html": OLD + "/company/about/"}
    assert_served(nginx, redirected, ["/Docs/A.html", "/docs/install.html"])


def review_csv(stores: Stores, capsys: pytest.CaptureFixture, *extra: str) -> list[dict]:
    ran = run_map(capsys, "--old", stores.old, "--new", stores.new, "--format", "csv", *extra)
    assert ran.code == 0, ran.err
    return list(csv.DictReader(io.StringIO(ran.out)))


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_the_review_csv_edited_and_fed_back_makes_the_final_map(
    stores: Stores, capsys: pytest.CaptureFixture, nginx: NginxServer, tmp_path: Path
) -> None:
    rows = review_csv(stores, capsys)
    assert list(rows[0])[-3:] == ["status", "decision", "note"]
    assert {row["decision"] for row in rows} == {""}
    by_old = {row["old"].removeprefix(OLD): row for row in rows}
    assert by_old["/docs/b.html"]["reason"] == "'" + HOSTILE_TITLE  # shown, never run
    assert by_old["/contact.php"]["runner_up"] == NEW + "/support/contact/"
    assert by_old["/promo/2018.html"]["suggestion"] == NEW + "/promo/"
    # The reviewer's edits, as a spreadsheet would save them (with a column of their own).
    for row in rows:
        row["owner"] = ""
    by_old["/contact.php"].update(decision="Accept", owner="ann")  # the ambiguous candidate
    by_old["/docs/install.html"].update(decision="change", new=NEW + "/guide/setup/", status="302")
    by_old["/about.html"].update(decision="reject", note="legal wants it gone")
    by_old["/promo/2018.html"].update(decision="change", new=NEW + "/promo/")  # its suggestion
    by_old["/docs/a.html"].update(decision="accept")
    by_old["/blog/2019/launch.html"]["new"] = NEW + "/news/"  # edited, no decision
    stale = {**by_old["/docs/b.html"], "old": OLD + "/docs/deleted.html", "decision": "accept"}
    write_csv(tmp_path / "reviewed.csv", [*rows, stale])
    reviewed = ("--reviewed", str(tmp_path / "reviewed.csv"))

    ran = run_map(capsys, "--old", stores.old, "--new", stores.new, "--format", "bulk", *reviewed)
    assert ran.code == 0, ran.err
    expected = {OLD + path: (NEW + target, 301) for path, target in ENTRIES.items()}
    del expected[OLD + "/about.html"]
    expected[OLD + "/docs/install.html"] = (NEW + "/guide/setup/", 302)
    expected[OLD + "/contact.php"] = (NEW + "/contact/", 301)
    expected[OLD + "/promo/2018.html"] = (NEW + "/promo/", 301)
    assert ran.bulk() == expected
    said = ran.err.splitlines()
    assert (
        f"migration-map: {tmp_path / 'reviewed.csv'} line 12: {OLD}/docs/deleted.html is not "
        "an old document of these crawls: left out"
    ) in said
    assert any("line 3: new was edited" in line and "decision is empty" in line for line in said)

    jsonl = {row["old"].removeprefix(OLD): row for row in run_map(
        capsys, "--old", stores.old, "--new", stores.new, *reviewed).jsonl()}  # fmt: skip
    assert jsonl["/docs/install.html"]["method"] == "reviewed"
    assert jsonl["/contact.php"]["method"] == "reviewed"  # was ambiguous: a person chose
    assert jsonl["/docs/a.html"]["method"] == "merged"  # accepted as it was: unchanged
    assert (jsonl["/about.html"]["entry"], jsonl["/about.html"]["method"]) == (False, "exact")
    assert jsonl["/about.html"]["reason"].startswith("rejected in review")

    # The next round starts from this one: decisions and the reviewer's columns kept.
    again = {row["old"].removeprefix(OLD): row for row in review_csv(stores, capsys, *reviewed)}
    assert again["/contact.php"]["owner"] == "ann"
    assert again["/about.html"]["note"] == "legal wants it gone"
    assert again["/docs/install.html"]["decision"] == "change"
    assert again["/docs/install.html"]["new"] == NEW + "/guide/setup/"

    nginx_map = run_map(
        capsys, "--old", stores.old, "--new", stores.new, "--format", "nginx", *reviewed
    )
    nginx.load(nginx_map.out)
    assert_served(nginx, {"/docs/install.html": NEW + "/guide/setup/"}, ["/about.html"], 302)
    assert_served(
        nginx, {"/contact.php": NEW + "/contact/", "/promo/2018.html": NEW + "/promo/"}, []
    )


HEADER = "old,new,confidence,method,entry,reason,decision\n"
ROW = f"{OLD}/about.html,{NEW}/company/about/,1.0,exact,True,,"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("old,new,confidence\n" + ROW + "\n", "line 1: no decision column"),
        ("", "line 1: no header"),
        (HEADER + ROW + "\n" + ROW.replace("about", "x") + "maybe\n", "line 3: decision 'maybe'"),
        (HEADER + ROW + "\n" + ROW + "accept\n", f"line 3: {OLD}/about.html is reviewed twice"),
        (HEADER + ROW.replace(f"{NEW}/company/about/", "") + "change\n", "line 2: change needs"),
        (HEADER + ROW.replace(f"{NEW}/company", "/company") + "change\n", "line 2: new is not"),
        (HEADER + ROW + "accept,extra,more\n", "line 2: 9 fields, the header has 7"),
        (HEADER + "\n" + ROW.replace(OLD, "www.example.org") + "\n", "line 3: old is not"),
        (HEADER + '"' + ROW + "\n", "line 2: not CSV"),
    ],
)
def test_a_malformed_review_file_is_one_line_naming_the_line(
    stores: Stores, capsys: pytest.CaptureFixture, tmp_path: Path, text: str, said: str
) -> None:
    (tmp_path / "reviewed.csv").write_text(text, encoding="utf-8")
    reviewed = ("--reviewed", str(tmp_path / "reviewed.csv"))
    ran = run_map(capsys, "--old", stores.old, "--new", stores.new, *reviewed)
    assert ran.code == 2 and ran.out == "" and ran.matched == []
    assert ran.err.count("\n") == 1 and ran.err.startswith("error: "), ran.err
    assert f"{tmp_path / 'reviewed.csv'} {said}" in ran.err


def test_a_review_file_saved_by_a_spreadsheet_is_read(
    stores: Stores, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """A byte-order mark and ``;`` between fields, as spreadsheets in many locales save."""
    rows = review_csv(stores, capsys)
    (about,) = [row for row in rows if row["old"] == OLD + "/about.html"]
    line = ";".join(f'"{about[c]}"' if c != "decision" else "reject" for c in about)
    text = "\ufeff" + ";".join(about) + "\n" + line + "\n"
    (tmp_path / "reviewed.csv").write_text(text, encoding="utf-8")
    reviewed = ("--reviewed", str(tmp_path / "reviewed.csv"))
    ran = run_map(capsys, "--old", stores.old, "--new", stores.new, "--format", "bulk", *reviewed)
    assert ran.code == 0, ran.err
    assert OLD + "/about.html" not in ran.bulk() and len(ran.bulk()) == len(ENTRIES) - 1


def cli(*args: str) -> tuple[int, str, str]:
    done = scrapy("migration-map", *args)
    return done.returncode, done.stdout, done.stderr


def test_stores_that_cannot_be_mapped_are_one_line(stores: Stores, tmp_path: Path) -> None:
    """Before any matching: each case one ``error:`` line and exit status 2."""
    empty = write_store(tmp_path / "empty.sqlite", [])
    errors = write_store(tmp_path / "errors.sqlite", [OLD + "/gone.html"], status=404)
    old_file = stores.old.removeprefix("sqlite:///")
    cases = {
        ("--new", stores.new): "error: --old STORE_URL is required",
        ("--old", stores.old): "error: --new STORE_URL is required",
        ("--old", str(tmp_path / "nope.sqlite"), "--new", stores.new): (
            f"error: --old: no record store at {tmp_path / 'nope.sqlite'}: crawl the old site"
        ),
        ("--old", stores.old, "--new", empty): "error: --new: the store",
        ("--old", errors, "--new", stores.new): "error: --old: the store",
        ("--old", stores.old, "--new", old_file): "error: --old and --new are the same store",
        ("--old", __file__, "--new", stores.new): f"error: --old: cannot use {__file__} as a",
        ("--old", stores.old, "--new", stores.new, "--min-confidence", "high"): (
            "error: --min-confidence high: a number from 0 to 1"
        ),
        ("--old", stores.old, "--new", stores.new, "--host", "www.example.org/new"): (
            "error: --host www.example.org/new: a host name"
        ),
    }
    for args, said in cases.items():
        code, out, err = cli(*args)
        assert (code, out) == (2, ""), (args, err)
        assert err.count("\n") == 1 and err.startswith(said), (args, err)
    assert "holds no page fetched with status 200" in cli("--old", errors, "--new", empty)[2]


@pytest.mark.postgres
def test_an_old_crawl_in_postgresql(
    stores: Stores, pg_url: str, capsys: pytest.CaptureFixture
) -> None:
    """The old crawl's store in PostgreSQL, the new one's in SQLite: the same map; the same
    PostgreSQL store twice is refused."""
    old = write_store(pg_url, [OLD + path for path in MIGRATION])
    ran = run_map(capsys, "--old", old, "--new", stores.new, "--format", "bulk")
    assert ran.code == 0, ran.err
    assert ran.bulk() == {OLD + path: (NEW + target, 301) for path, target in ENTRIES.items()}
    assert ran.matched == [({OLD + p for p in MIGRATION}, {NEW + p for p in NEW_PAGES})]
    twice = run_map(capsys, "--old", old, "--new", old)
    assert twice.code == 2 and twice.matched == []
    assert twice.err.startswith("error: --old and --new are the same store")


def page_counts(rows: list[dict]) -> dict[str, int]:
    """The review page's categories, counted from the jsonl."""
    methods = Counter(row["method"] for row in rows)
    return {
        "ambiguous": methods["ambiguous"],
        "removed": methods["removed"],
        "other": sum(not r["entry"] and r["method"] not in ("ambiguous", "removed") for r in rows),
        "merged": methods["merged"],
        "reviewed": methods["reviewed"],
        "entries": sum(row["entry"] for row in rows),
    }


#: Appended to a copy of the page: sorts the entries by confidence (twice: descending), then
#: filters on "guide/" and writes down what it saw.
SORT_FILTER_PROBE = """<script>addEventListener('load', () => {
  const table = document.querySelector('#entries table');
  const heads = Array.from(table.tHead.rows[0].cells);
  const column = heads.findIndex(th => th.textContent === 'confidence');
  heads[column].click(); heads[column].click();
  const seen = document.documentElement.dataset;
  seen.confidences = Array.from(table.tBodies[0].rows, r => r.cells[column].textContent).join(' ');
  const filter = document.getElementById('filter');
  filter.value = 'GUIDE/';
  filter.dispatchEvent(new Event('input'));
  const shown = Array.from(table.tBodies[0].rows).filter(row => !row.hidden);
  seen.shown = shown.map(row => row.cells[0].textContent).join(' ');
});</script>"""


def test_the_review_page_renders_offline_with_the_jsonl_counts_sorts_and_filters(
    stores: Stores, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    common = ("--old", stores.old, "--new", stores.new, "--min-confidence", "0.9")
    page_html = run_map(capsys, *common, "--format", "html").out
    assert not re.search(r"(?:src|href)=\"(?!#)|url\(|@import", page_html.split("<body", 1)[1])
    assert "<h1>Migration review: www.example.org \u2192 staging.example.org</h1>" in page_html

    def section(ident: str) -> str:
        return page_html.split(f'id="{ident}"')[1].split("</section>")[0]

    for shown in ("two candidates within 0.05", NEW + "/support/contact/", "0.690", "0.710"):
        assert shown in section("ambiguous"), shown
    assert NEW + "/promo/</td>" in section("removed") and ">410</td>" in section("removed")
    assert "below --min-confidence 0.9" in section("other")
    assert "&lt;img src=&quot;/x&quot; onerror" in section("merged") and "<img" not in page_html
    page = tmp_path / "review.html"
    page.write_text(page_html.replace("</body>", RESOURCE_PROBE + "</body>"), encoding="utf-8")
    result = chromium("--dump-dom", page.as_uri(), tmp=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'data-resources="|"' in result.stdout
    requested = set(re.findall(r'"url":"([^"]+)"', (tmp_path / "net.json").read_text()))
    assert {url for url in requested if not BROWSER_SERVICES.match(url)} <= {page.as_uri()}
    shown = {k: int(v) for k, v in re.findall(r'data-category="([\w-]+)">(\d+)<', result.stdout)}
    expected = page_counts(run_map(capsys, *common).jsonl())
    assert shown == expected
    assert expected == {"ambiguous": 1, "removed": 2, "other": 1, "merged": 2, "reviewed": 0,
                        "entries": 6}  # fmt: skip

    page.write_text(page_html.replace("</body>", SORT_FILTER_PROBE + "</body>"), encoding="utf-8")
    result = chromium("--dump-dom", page.as_uri(), tmp=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = re.search(r'data-confidences="([\d. ]+)"', result.stdout)[1].split()
    assert seen == sorted(seen, reverse=True) and len(set(seen)) > 2
    listed = re.search(r'data-shown="([^"]*)"', result.stdout)[1].split()
    assert sorted(listed) == [OLD + "/docs/a.html", OLD + "/docs/b.html"]


@pytest.mark.slow
def test_two_real_crawls_mapped_deployed_and_requested(
    tmp_path: Path, nginx: NginxServer, apache: ApacheServer
) -> None:
    """Both sites served and crawled with ``scrapy crawl site``; the project's matcher maps
    them (new paths, changed boilerplate); nginx and Apache serve the map: each old page
    redirects to its new one."""
    pytest.importorskip("bloom_frontier.migration.matching")
    words = ["migration", "engineers", "match", "every", "old", "page", "by", "its", "content"]
    old_routes: dict[str, Page] = {}
    new_routes: dict[str, Page] = {}
    moved = {}
    for turn, name in enumerate(("alpha", "beta", "gamma", "delta")):
        text = " ".join(words[turn:] + words[:turn] + [name]) * 20
        body = f"<title>{name}</title></head><body><h1>{name}</h1><p>{text}</p>"
        old_routes[f"/{name}.html"] = Page(f"<html><head>{body}<footer>old</footer></body></html>")
        moved[f"/{name}.html"] = f"/pages/{name}/"
        new_routes[f"/pages/{name}/"] = Page(f"<html><head>{body}<nav>new</nav></body></html>")
    old_routes["/"] = html(*old_routes)
    new_routes["/"] = html(*new_routes)
    stores = {}
    for name, routes in (("old", old_routes), ("new", new_routes)):
        server = TestServer(routes)
        with server:
            store = f"sqlite:///{tmp_path / name}.sqlite"
            crawl_site(f"{server.url}/", store, tmp_path / f"{name}.log")
        stores[name] = (store, server.url)
    servers: list[tuple[_WebServer, str]] = [(nginx, "nginx"), (apache, "apache")]
    for server, fmt in servers:
        code, out, err = cli("--old", stores["old"][0], "--new", stores["new"][0], "--format", fmt)
        assert code == 0, err
        assert "migration-map: 5 old documents: " in err
        server.load(out)
        for path, target in moved.items():
            response = server.get(path, "127.0.0.1")
            assert (response.status, response.getheader("Location")) == (
                301, stores["new"][1] + target), (fmt, path)  # fmt: skip
