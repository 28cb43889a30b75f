"""``scrapy validate-map`` against a redirect map deployed in a real nginx and a real Apache.

The map is a migration's plan (JSONL of ``scrapy migration-map``, on the production hosts
``old.example`` and ``new.example``); the deployment is what went live, loaded into Debian's
nginx and Apache (:mod:`tests.webservers`) from the project's own map writers, with the
mistakes a migration makes injected: a chain, a 302, a wrong target, a target that 404s, a
loop, a target with noindex (meta and header), a target whose canonical points elsewhere, a
target that redirects again, a source never deployed, a hop to a private address. The new
site's pages are served by the tests' HTTP server. The check is a staging check: sources are
rebased onto the server under test (``--base``), targets onto the new site
(``--target-base``). Each row must get exactly its reason, the good rows pass, the command
exits 1; a map of good rows alone exits 0.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bloom_frontier.migration.answers import MigrationAnswer
from bloom_frontier.migration.validate import MapRow, Rebase, base_origin
from bloom_frontier.redirectmap.apache import write_apache
from bloom_frontier.redirectmap.matching import Entry, request_key
from bloom_frontier.redirectmap.nginx import write_nginx
from tests.httpserver import Page, TestServer, html, redirect
from tests.redirect_server import scrapy
from tests.servers import free_port
from tests.webservers import NginxServer, _WebServer

OLD = "http://old.example"
NEW = "http://new.example"
#: A host of its own to the crawler, private (loopback): only the SSRF settings let it in.
PRIVATE_HOST = "127.0.0.2"

#: The migration's plan: old path -> new path, and what validate-map must find wrong.
PLAN = {
    "/docs/a.html": ("/guide/a/", ()),
    "/docs/c.html": ("/guide/c/", ()),
    "/docs/chain.html": ("/guide/chain/", ("chain",)),
    "/docs/temp.html": ("/guide/temp/", ("temporary",)),
    "/docs/wrong.html": ("/guide/wrong/", ("wrong-target",)),
    "/docs/gone.html": ("/guide/gone/", ("target-not-found",)),
    "/docs/loop.html": ("/guide/loop/", ("loop",)),
    "/docs/noindex.html": ("/guide/noindex/", ("noindex",)),
    "/docs/header-noindex.html": ("/guide/header-noindex/", ("noindex",)),
    "/docs/canon.html": ("/guide/canon/", ("canonical-elsewhere",)),
    "/docs/moved.html": ("/guide/moved/", ("chain", "target-redirects")),
    "/docs/missing.html": ("/guide/missing/", ("not-redirecting",)),
}
GOOD = ("/docs/a.html", "/docs/c.html")


def new_site() -> dict[str, Page]:
    """The new site's pages (the targets), as the tests' HTTP server serves them."""
    page = html(head='<link rel="canonical" href="/guide/a/">', title="A")
    pages = {
        path: html(title=path)
        for path in ("/guide/c/", "/guide/chain/", "/guide/temp/", "/guide/wrong/")
    }
    return {
        **pages,
        "/guide/a/": page,
        "/guide/noindex/": html(head='<meta name="robots" content="noindex, follow">'),
        "/guide/header-noindex/": Page("<p>x</p>", headers={"X-Robots-Tag": "googlebot: noindex"}),
        "/guide/canon/": html(head='<link rel="canonical" href="/guide/a/">'),
        "/guide/moved/": redirect("/guide/final/"),
        "/guide/final/": html(title="final"),
        "/guide/private/": html(title="private"),
    }


def deployed(server: _WebServer, new: str, private: str) -> list[Entry]:
    """What went live on ``server``: the plan, with the injected mistakes."""
    old = f"http://127.0.0.1:{server.port}"
    redirects = {
        "/docs/a.html": (301, f"{new}/guide/a/"),
        "/docs/c.html": (308, f"{new}/guide/c/"),
        "/docs/chain.html": (301, f"{old}/docs/chain-step.html"),
        "/docs/chain-step.html": (301, f"{new}/guide/chain/"),
        "/docs/temp.html": (302, f"{new}/guide/temp/"),
        "/docs/wrong.html": (301, f"{new}/guide/a/"),
        "/docs/gone.html": (301, f"{new}/guide/gone/"),
        "/docs/loop.html": (301, f"{old}/docs/loop-back.html"),
        "/docs/loop-back.html": (301, f"{old}/docs/loop.html"),
        "/docs/noindex.html": (301, f"{new}/guide/noindex/"),
        "/docs/header-noindex.html": (301, f"{new}/guide/header-noindex/"),
        "/docs/canon.html": (301, f"{new}/guide/canon/"),
        "/docs/moved.html": (301, f"{new}/guide/moved/"),
        "/docs/private.html": (301, f"{private}/guide/private/"),
    }
    return [
        Entry(request_key(f"{old}{path}"), target, status, f"{old}{path}")
        for path, (status, target) in redirects.items()
    ]


def load(server: _WebServer, entries: list[Entry]) -> None:
    out = io.StringIO()
    (write_nginx if isinstance(server, NginxServer) else write_apache)(entries, out)
    server.load(out.getvalue())


def migration_map(path: Path, private: str, only: tuple[str, ...] = ()) -> Path:
    """The plan as ``scrapy migration-map --format jsonl`` writes it, with a removed page
    (not an entry) and the private row's target on the private host itself."""
    answers = [
        MigrationAnswer(f"{OLD}{old}", f"{NEW}{new}", 0.98, "near-content", True)
        for old, (new, _) in PLAN.items()
        if not only or old in only
    ]
    if not only:
        answers += [
            MigrationAnswer(
                f"{OLD}/docs/private.html", f"{private}/guide/private/", 1.0, "exact", True
            ),
            MigrationAnswer(f"{OLD}/docs/retired.html", None, 0.0, "removed", False, "no page"),
        ]
    path.write_text("".join(json.dumps(a.as_json()) + "\n" for a in answers), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def site() -> Iterator[tuple[TestServer, TestServer]]:
    """The new site, and a page on a private host of its own."""
    with TestServer(new_site()) as new, TestServer(new_site(), host=PRIVATE_HOST) as private:
        yield new, private


def validate(map_path: Path, server: _WebServer, new: TestServer, *options: str):
    return scrapy(
        "validate-map", str(map_path),
        "--base", f"http://127.0.0.1:{server.port}", "--target-base", new.url, *options,
    )  # fmt: skip


@pytest.mark.parametrize("server_name", ["nginx", "apache"])
def test_every_injected_mistake_is_found_with_its_reason(
    server_name: str,
    request: pytest.FixtureRequest,
    site: tuple[TestServer, TestServer],
    tmp_path: Path,
) -> None:
    server: _WebServer = request.getfixturevalue(server_name)
    new, private = site
    load(server, deployed(server, new.url, private.url))
    plan = migration_map(tmp_path / "map.jsonl", private.url)

    result = validate(plan, server, new, "--format", "jsonl")

    assert result.returncode == 1, result.stderr
    rows = {
        urlsplit_path(row["map_source"]): row for row in map(json.loads, result.stdout.splitlines())
    }
    expected = {old: problems for old, (_, problems) in PLAN.items()}
    expected["/docs/private.html"] = ("blocked",)
    found = {
        path: tuple(row["problems"]) for path, row in rows.items() if row["result"] != "skipped"
    }
    assert found == expected
    assert rows["/docs/retired.html"]["result"] == "skipped"
    for path in GOOD:
        good = rows[path]
        assert good["result"] == "passed"
        assert good["final_url"] == f"{new.url}{PLAN[path][0]}"
        assert good["final_status"] == 200 and good["indexable"] is True
        assert good["source"] == f"http://127.0.0.1:{server.port}{path}"  # rebased
    assert rows["/docs/a.html"]["self_canonical"] is True
    assert rows["/docs/c.html"]["hops"] == [{"status": 308, "url": f"{new.url}/guide/c/"}]
    assert [hop["status"] for hop in rows["/docs/chain.html"]["hops"]] == [301, 301]
    assert rows["/docs/canon.html"]["canonical"] == f"{new.url}/guide/a/"
    assert rows["/docs/wrong.html"]["final_url"] == f"{new.url}/guide/a/"
    assert rows["/docs/gone.html"]["final_status"] == 404
    assert rows["/docs/missing.html"]["final_status"] == 404  # the server's own fallback
    assert "127.0.0.2" in rows["/docs/private.html"]["detail"]
    assert not any(hit.path == "/guide/private/" for hit in private.hits)  # never connected
    summary = result.stderr.strip().splitlines()[-1]
    assert summary.startswith("validate-map: 13 rows checked, 2 passed, 11 failed (")
    assert summary.endswith(", 1 skipped")


def urlsplit_path(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def test_private_hops_are_followed_only_when_the_settings_allow_them(
    nginx: NginxServer, site: tuple[TestServer, TestServer], tmp_path: Path
) -> None:
    new, private = site
    load(nginx, deployed(nginx, new.url, private.url))
    plan = migration_map(tmp_path / "map.jsonl", private.url)

    result = validate(
        plan, nginx, new, "--format", "csv", "-s", f"SSRF_ALLOWED_HOSTS={PRIVATE_HOST}"
    )

    rows = {
        urlsplit_path(row["map_source"]): row for row in csv.DictReader(io.StringIO(result.stdout))
    }
    assert rows["/docs/private.html"]["result"] == "passed", rows["/docs/private.html"]
    assert rows["/docs/private.html"]["final_url"] == f"{private.url}/guide/private/"
    assert any(hit.path == "/guide/private/" for hit in private.hits)


def test_a_map_of_good_rows_exits_0_in_every_format(
    nginx: NginxServer, site: tuple[TestServer, TestServer], tmp_path: Path
) -> None:
    new, private = site
    load(nginx, deployed(nginx, new.url, private.url))
    # A bulk map as `scrapy redirects --format bulk` writes it, on the hosts under test.
    bulk = tmp_path / "bulk.csv"
    origin = f"http://127.0.0.1:{nginx.port}"
    bulk.write_text(
        "source,target,status\n"
        + "".join(f"{origin}{path},{new.url}{PLAN[path][0]},301\n" for path in GOOD),
        encoding="utf-8",
    )
    text = scrapy("validate-map", str(bulk), "--base", origin)
    assert text.returncode == 0, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["ok", "ok"]
    assert lines[-1] == "validate-map: 2 rows checked, 2 passed, 0 failed, 0 skipped"

    page = scrapy("validate-map", str(bulk), "--base", origin, "--format", "html")
    assert page.returncode == 0, page.stderr
    parsed = _Page()
    parsed.feed(page.stdout)
    assert parsed.external == []  # self-contained: nothing fetched from anywhere
    assert parsed.results == ["passed", "passed"]
    assert f"{origin}/docs/a.html" in page.stdout


class _Page(HTMLParser):
    """The report page's result cells and anything it would load."""

    def __init__(self) -> None:
        super().__init__()
        self.external: list[str] = []
        self.results: list[str] = []
        self._in_result = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in ("script", "img", "link", "iframe") and (values.get("src") or values.get("href")):
            self.external.append(tag)
        self._in_result = tag == "td" and values.get("class") == "result"

    def handle_data(self, data: str) -> None:
        if self._in_result:
            self.results.append(data)
            self._in_result = False


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"old": "http://a.example/x", "new": "http://b.example/y", "confidence": 1, '
         '"method": "exact", "entry": true}\n\n{"old": "http://a.example/z", "new"\n',
         "line 3: not JSON"),
        ("http://a.example/x,http://b.example/y\nhttp://a.example/z\n", "line 2: the target"),
        ("from,to\nhttp://a.example/x,http://b.example/y\n", "line 1: no header"),
        ("source,target,status\nhttp://a.example/x,http://b.example/y,200\n",
         "line 2: status '200' is not a redirect status"),
        ('{"old": "http://a.example/x", "new": null, "confidence": 0.9, "method": "exact", '
         '"entry": true}\n', "line 1: not a migration answer (an entry needs a target"),
    ],
)  # fmt: skip
def test_an_unreadable_map_names_its_line(content: str, message: str, tmp_path: Path) -> None:
    bad = tmp_path / "map.txt"
    bad.write_text(content, encoding="utf-8")
    result = scrapy("validate-map", str(bad), "--base", "http://127.0.0.1:9")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


@pytest.mark.parametrize(
    "base", ["ftp://127.0.0.1/", "127.0.0.1:8080", "http://127.0.0.1/staging/", "http://:80"]
)
def test_a_bad_base_is_one_line(base: str, tmp_path: Path) -> None:
    good = tmp_path / "map.csv"
    good.write_text("source,target\nhttp://a.example/x,http://a.example/y\n", encoding="utf-8")
    result = scrapy("validate-map", str(good), "--base", base)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: --base {base!r} is not"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_an_unreachable_site_is_one_line(tmp_path: Path) -> None:
    good = tmp_path / "map.csv"
    good.write_text("source,target\nhttp://a.example/x,http://a.example/y\n", encoding="utf-8")
    base = f"http://127.0.0.1:{free_port()}"
    result = scrapy("validate-map", str(good), "--base", base)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot reach the site at {base} ("), result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


@pytest.mark.parametrize(
    ("pairs", "base", "target_base", "expected"),
    [
        # Same site: nothing moves.
        ([("https://www.e.com/a", "https://www.e.com/b")], "https://www.e.com", None,
         ("https://www.e.com/a", "https://www.e.com/b")),
        # A migration map of two crawls, checked on staging: both onto --base.
        ([("https://www.e.com/a", "https://new.e.com/b")], "https://staging.e.com", None,
         ("https://staging.e.com/a", "https://staging.e.com/b")),
        # A domain change: the redirects on the old host, the pages on the new one.
        ([("https://old.com/a?x=1", "https://new.com/b")], "https://old.com", "https://new.com",
         ("https://old.com/a?x=1", "https://new.com/b")),
        # A bulk map on the hosts under test keeps its targets wherever they are.
        ([("http://127.0.0.1:8080/a", "http://127.0.0.1:9090/b")], "http://127.0.0.1:8080", None,
         ("http://127.0.0.1:8080/a", "http://127.0.0.1:9090/b")),
    ],
)  # fmt: skip
def test_sources_and_targets_are_rebased_as_the_docs_say(
    pairs: list[tuple[str, str]], base: str, target_base: str | None, expected: tuple[str, str]
) -> None:
    rows = [MapRow(1, source, target) for source, target in pairs]
    rebase = Rebase.of(rows, base_origin(base, "--base"), target_base)
    assert (rebase.source(rows[0].source), rebase.target(rows[0].target or "")) == expected


def test_a_partner_target_is_kept_when_the_map_moves() -> None:
    rows = [
        MapRow(1, "https://www.e.com/a", "https://new.e.com/a"),
        MapRow(2, "https://www.e.com/b", "https://new.e.com/b"),
        MapRow(3, "https://www.e.com/shop", "https://partner.org/shop"),
    ]
    rebase = Rebase.of(rows, "https://staging.e.com", None)
    assert rebase.target("https://new.e.com/b") == "https://staging.e.com/b"
    assert rebase.target("https://partner.org/shop") == "https://partner.org/shop"


def spiral(path: str) -> Page | None:
    """``/spiral/N`` redirects to ``/spiral/N+1``, for ever."""
    if path.startswith("/spiral/"):
        return redirect(f"/spiral/{int(path.rsplit('/', 1)[1]) + 1}")
    return None


def test_the_hop_cap_and_robots_txt_hold(tmp_path: Path) -> None:
    routes = {
        "/robots.txt": Page("User-agent: *\nDisallow: /closed/\n", content_type="text/plain"),
        "/old": redirect("/closed/page"),
        "/*": spiral,
    }
    with TestServer(routes) as server:
        bulk = tmp_path / "bulk.csv"
        bulk.write_text(
            f"{server.url}/spiral/0,{server.url}/done\n{server.url}/old,{server.url}/closed/page\n",
            encoding="utf-8",
        )
        result = scrapy(
            "validate-map", str(bulk), "--base", server.url, "--format", "jsonl",
            "-s", "REDIRECT_MAX_HOPS=3",
        )  # fmt: skip
        fetched = server.paths()
    assert result.returncode == 1, result.stderr
    capped, closed = map(json.loads, result.stdout.splitlines())
    assert capped["problems"] == ["too-many-hops"]
    assert [hop["url"] for hop in capped["hops"]] == [f"{server.url}/spiral/{n}" for n in (1, 2, 3)]
    assert "/spiral/3" not in fetched  # the hop past the cap is not fetched
    assert closed["problems"] == ["robots"]
    assert "/closed/page" not in fetched
