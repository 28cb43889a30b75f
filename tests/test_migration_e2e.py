"""A migration from start to end: both sites served and crawled with ``scrapy crawl site``,
``scrapy migration-map`` made from the two stores and reviewed, the reviewed map deployed in a
real nginx and a real Apache, and ``scrapy validate-map`` run against them: the mistakes put
into the deployment (a temporary status, a wrong target, a target that now redirects) are
each found, with its reason, and the right row passes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from tests.httpserver import Page, TestServer, html, redirect
from tests.redirect_server import crawl_site, scrapy
from tests.webservers import ApacheServer, NginxServer, _WebServer

NAMES = ("alpha", "beta", "gamma", "delta")
WORDS = ["migration", "engineers", "match", "every", "old", "page", "by", "its", "content"]


def sites() -> tuple[dict[str, Page], dict[str, Page]]:
    """An old site of four pages and the new one holding the same content at new paths, with
    other boilerplate (a footer gone, a navigation added)."""
    old: dict[str, Page] = {}
    new: dict[str, Page] = {}
    for turn, name in enumerate(NAMES):
        text = " ".join(WORDS[turn:] + WORDS[:turn] + [name]) * 20
        body = f"<title>{name}</title></head><body><h1>{name}</h1><p>{text}</p>"
        old[f"/{name}.html"] = Page(f"<html><head>{body}<footer>old</footer></body></html>")
        new[f"/pages/{name}/"] = Page(f"<html><head>{body}<nav>new</nav></body></html>")
    old["/"] = html(*old)
    new["/"] = html(*new)
    return old, new


def migration_map(*args: str) -> str:
    done = scrapy("migration-map", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def validated(plan: Path, server: _WebServer, new: TestServer) -> dict[str, dict]:
    """``validate-map`` of ``plan`` against ``server`` (the old site's host), targets on the
    new site: each checked row by its old page's name; exit status 1 (rows fail)."""
    done = scrapy(
        "validate-map", str(plan), "--base", f"http://127.0.0.1:{server.port}",
        "--target-base", new.url, "--format", "jsonl",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {
        row["map_source"].rsplit("/", 1)[-1].removesuffix(".html"): row
        for row in rows
        if row["result"] != "skipped"
    }


def test_two_crawls_mapped_reviewed_deployed_and_validated(
    tmp_path: Path, nginx: NginxServer, apache: ApacheServer
) -> None:
    old_routes, new_routes = sites()
    old_store, new_store = (f"sqlite:///{tmp_path / name}.sqlite" for name in ("old", "new"))
    with TestServer(old_routes) as old_site:
        crawl_site(f"{old_site.url}/", old_store, tmp_path / "old.log")
    with TestServer(new_routes) as new_site:
        crawl_site(f"{new_site.url}/", new_store, tmp_path / "new.log")
        stores = ("--old", old_store, "--new", new_store)
        # The review: beta accepted as a temporary redirect (the mistake to be found).
        review = list(csv.DictReader(io.StringIO(migration_map(*stores, "--format", "csv"))))
        by_name = {row["old"].rsplit("/", 1)[-1].removesuffix(".html"): row for row in review}
        assert all(by_name[name]["new"] == f"{new_site.url}/pages/{name}/" for name in NAMES)
        by_name["beta"].update(decision="accept", status="302")
        reviewed = tmp_path / "review.csv"
        with reviewed.open("w", newline="", encoding="utf-8") as out:
            writer = csv.DictWriter(out, fieldnames=list(review[0]))
            writer.writeheader()
            writer.writerows(review)
        # The plan the check reads: the map as the matcher made it, but for gamma, whose
        # target someone changed by hand to alpha's page (the deployed map still says gamma).
        plan = tmp_path / "plan.jsonl"
        answers = [json.loads(line) for line in migration_map(*stores).splitlines()]
        for answer in answers:
            if answer["old"].endswith("/gamma.html"):
                answer["new"] = f"{new_site.url}/pages/alpha/"
        plan.write_text("".join(json.dumps(a) + "\n" for a in answers), encoding="utf-8")
        # After the map was made, delta's new page moved on: its target now redirects.
        new_site.routes["/pages/delta/"] = redirect("/pages/delta/v2/")
        new_site.routes["/pages/delta/v2/"] = new_routes["/pages/delta/"]
        for server, fmt in ((nginx, "nginx"), (apache, "apache")):
            server.load(migration_map(*stores, "--reviewed", str(reviewed), "--format", fmt))
            rows = validated(plan, server, new_site)
            assert set(rows) == set(NAMES), (fmt, rows)
            assert rows["alpha"]["result"] == "passed", (fmt, rows["alpha"])
            assert rows["alpha"]["final_url"] == f"{new_site.url}/pages/alpha/"
            assert "temporary" in rows["beta"]["problems"], (fmt, rows["beta"])
            assert "wrong-target" in rows["gamma"]["problems"], (fmt, rows["gamma"])
            assert "target-redirects" in rows["delta"]["problems"], (fmt, rows["delta"])
