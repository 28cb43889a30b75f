"""Migration matching: small migrations built in code and recorded through the crawl's own
recording functions, and one pair of real sites crawled with ``scrapy crawl site``; each
old document's answer asserted (target, method, entry)."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from bloom_frontier.content.features import fingerprint_page, match_features
from bloom_frontier.migration.answers import MigrationAnswer
from bloom_frontier.migration.matching import match_sites
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import PageRecord
from bloom_frontier.pipelines.writer import StoreWriter
from tests.crawls import ROOT, site_crawl_command
from tests.httpserver import Page, TestServer, redirect

OLD, NEW = "http://old.test", "http://new.test"
STEMS = ("bar", "cen", "dol", "fim", "gor", "hul", "jat", "kev", "lum", "mox", "nip", "quor")
VOCABULARY = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "tu") for b in STEMS]


def words(seed: int, count: int) -> list[str]:
    """``count`` words drawn for ``seed``: each page's own text."""
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) for _ in range(count)]


def paragraphs(seed: int, count: int = 4, size: int = 60) -> list[str]:
    return [" ".join(words(seed * 100 + number, size)) for number in range(count)]


def old_page(title: str, body: list[str], links: tuple[str, ...] = ()) -> str:
    """A page of the old site: its header, navigation and footer around a ``<main>``."""
    nav = " ".join(f'<a href="{link}">{link}</a>' for link in links)
    text = "".join(f"<p>{paragraph}</p>" for paragraph in body)
    return (
        f"<html><head><title>{title} - Old Docs</title></head><body>"
        f'<header><a href="/">Old Docs home</a> search the old docs</header>'
        f"<nav>Start Guides Reference Tutorials {nav}</nav>"
        f"<main><h1>{title}</h1>{text}</main>"
        "<footer>Copyright the Old Docs team. Last updated March 3, 2024.</footer>"
        "</body></html>"
    )


def new_page(title: str, body: list[str], links: tuple[str, ...] = (), extra: str = "") -> str:
    """A page of the new site: a new title suffix, navigation, cookie banner and footer,
    no ``<main>`` (the boilerplate is told by its tags and classes)."""
    nav = " ".join(f'<a href="{link}">{link}</a>' for link in links)
    text = "".join(f"<p>{paragraph}</p>" for paragraph in body)
    return (
        f"<html><head><title>{title} | Knowledge Hub</title></head><body>"
        '<div class="cookie-banner">We use cookies to count visits. Accept all?</div>'
        f'<div class="site-header">Knowledge Hub menu and account login</div>'
        f'<div class="sidebar">Browse the hub: topics, news, events {nav}</div>'
        f'<div class="content"><h1>{title}</h1>{text}{extra}</div>'
        '<div class="site-footer">Knowledge Hub, updated December 9, 2027. Imprint.</div>'
        "</body></html>"
    )


def record(store: Path, host: str, site: dict[str, str]) -> StoreReader:
    """Record ``site`` (path to HTML) as fetched 200 pages, as a crawl records them."""
    writer = StoreWriter.from_url(f"sqlite:///{store}")
    for path, text in site.items():
        url = host + path
        page = PageRecord(fetch_url=url, final_url=url, key=None, status=200)
        writer.add_page(page)
        writer.add_fingerprint(page, fingerprint_page(text.encode(), text, 200, None, "n2", url))
    writer.close()
    return StoreReader.from_url(f"sqlite:///{store}")


def answers_of(
    tmp_path: Path, old: dict[str, str], new: dict[str, str]
) -> dict[str, MigrationAnswer]:
    old_store = record(tmp_path / "old.sqlite", OLD, old)
    new_store = record(tmp_path / "new.sqlite", NEW, new)
    try:
        answers = match_sites(old_store, new_store)
    finally:
        old_store.close()
        new_store.close()
    return {answer.old.removeprefix(OLD): answer for answer in answers}


def mapping(answers: dict[str, MigrationAnswer]) -> dict[str, str | None]:
    """Old path -> new path of the entries, None for the others."""
    return {
        old: answer.new.removeprefix(NEW) if answer.entry and answer.new else None
        for old, answer in answers.items()
    }


LINKS = ("/guide/install.html", "/guide/config.html", "/ref/api.html")


@pytest.fixture
def migration(tmp_path: Path) -> dict[str, MigrationAnswer]:
    """A migration with every kind of change: renamed, edited, merged, removed, decoys, short
    pages, and a page whose URL has a parameter."""
    install, config, api = paragraphs(1), paragraphs(2), paragraphs(3, count=6)
    faq_small, faq_big = paragraphs(4, count=2), paragraphs(5, count=6)
    removed = paragraphs(6)
    decoy = paragraphs(7, count=5)
    decoy_twin = [*decoy[:4], " ".join(words(70, 60))]  # 4 of 5 paragraphs the same
    edited_api = list(api)
    edited_api[2] = edited_api[2].replace(edited_api[2].split()[5], "changed", 1)
    edited_api.append("This page was reviewed when the documentation moved to its new home.")
    old = {
        "/index.html": old_page(
            "Welcome", paragraphs(8), ("/guide/install.html", "/old-news.html")
        ),
        "/guide/install.html": old_page("Installing", install, LINKS),
        "/guide/config.html": old_page("Configuring", config, LINKS),
        "/ref/api.html": old_page("API reference", api, LINKS),
        "/faq/short.html": old_page("Quick answers", faq_small),
        "/faq/long.html": old_page("Frequent questions", faq_big),
        "/old-news.html": old_page("News of 2019", removed, ("/index.html",)),
        "/ref/decoy-a.html": old_page("Decoy alpha", decoy),
        "/ref/decoy-b.html": old_page("Decoy beta", decoy_twin),
        "/contact.html": old_page("Contact", ["Write to the team at the usual address."]),
        "/about.html": old_page("About", ["A small team writes these documents."]),
        "/item?id=7": old_page("Item seven", paragraphs(9)),
    }
    merged_section = (
        f"<section><h1>Quick answers</h1>{''.join(f'<p>{p}</p>' for p in faq_small)}</section>"
    )
    new = {
        "/index.html": new_page("Welcome", paragraphs(8), ("/setup/installing/",)),
        "/setup/installing/": new_page("Installing", install, LINKS),
        "/setup/configuring/": new_page("Configuring", config, LINKS),
        "/reference/api/": new_page("API reference", edited_api, LINKS),
        "/help/faq/": new_page("Frequent questions", faq_big, extra=merged_section),
        "/reference/alpha/": new_page("Decoy alpha", decoy),
        "/reference/beta/": new_page("Decoy beta", decoy_twin),
        "/contact/": new_page("Contact", ["Write to the team at the usual address."]),
        "/about-us/": new_page("About", ["A small team writes these documents!"]),
        "/items/7/": new_page("Item seven", paragraphs(9)),
        "/blog/launch/": new_page("Launch", paragraphs(10)),  # new content, no old page
    }
    return answers_of(tmp_path, old, new)


def test_every_old_page_goes_where_its_content_went(migration: dict[str, MigrationAnswer]) -> None:
    assert mapping(migration) == {
        "/index.html": "/index.html",
        "/guide/install.html": "/setup/installing/",
        "/guide/config.html": "/setup/configuring/",
        "/ref/api.html": "/reference/api/",
        "/faq/short.html": "/help/faq/",
        "/faq/long.html": "/help/faq/",
        "/old-news.html": None,
        "/ref/decoy-a.html": "/reference/alpha/",
        "/ref/decoy-b.html": "/reference/beta/",
        "/contact.html": "/contact/",
        "/about.html": "/about-us/",
        "/item?id=7": "/items/7/",
    }


def test_the_methods_say_what_the_evidence_was(migration: dict[str, MigrationAnswer]) -> None:
    methods = {old: answer.method for old, answer in migration.items()}
    assert methods["/guide/install.html"] == "exact"  # new boilerplate, same main content
    assert methods["/ref/api.html"] == "near-content"  # a word changed, a sentence added
    assert methods["/faq/short.html"] == methods["/faq/long.html"] == "merged"
    assert methods["/about.html"] == "title"  # short: its title decides
    assert methods["/old-news.html"] == "removed"


def test_a_removed_page_is_no_entry_and_suggests_its_parent(
    migration: dict[str, MigrationAnswer],
) -> None:
    gone = migration["/old-news.html"]
    assert (gone.entry, gone.new, gone.method) == (False, None, "removed")
    assert gone.suggestion == f"{NEW}/index.html"  # the old home page linked to it


def test_a_page_without_matched_parent_suggests_410(tmp_path: Path) -> None:
    answers = answers_of(
        tmp_path,
        {"/a.html": old_page("Alpha", paragraphs(1)), "/b.html": old_page("Beta", paragraphs(2))},
        {"/alpha/": new_page("Alpha", paragraphs(1))},
    )
    assert (answers["/b.html"].method, answers["/b.html"].suggestion) == ("removed", "410")


def test_two_equal_candidates_are_ambiguous_not_guessed(tmp_path: Path) -> None:
    """The new site holds the page twice: no entry, both named for review."""
    text = paragraphs(1)
    answers = answers_of(
        tmp_path,
        {"/page.html": old_page("Page", text)},
        {"/copy-one/": new_page("Page", text), "/copy-two/": new_page("Page", text)},
    )
    answer = answers["/page.html"]
    assert (answer.method, answer.entry) == ("ambiguous", False)
    assert {answer.new, answer.runner_up} == {f"{NEW}/copy-one/", f"{NEW}/copy-two/"}
    assert answer.runner_up_confidence is not None


def test_the_link_graph_tells_two_equal_candidates_apart(tmp_path: Path) -> None:
    """The new site holds the page twice, but only one copy sits where the old page sat:
    linked from its matched parent and linking to its matched child."""
    text = paragraphs(1)
    hub, child = paragraphs(2), paragraphs(3)
    answers = answers_of(
        tmp_path,
        {
            "/hub.html": old_page("Hub", hub, ("/page.html",)),
            "/page.html": old_page("Page", text, ("/child.html",)),
            "/child.html": old_page("Child", child),
        },
        {
            "/hub/": new_page("Hub", hub, ("/copy-one/",)),
            "/copy-one/": new_page("Page", text, ("/child/",)),
            "/copy-two/": new_page("Page", text),
            "/child/": new_page("Child", child),
        },
    )
    answer = answers["/page.html"]
    assert (answer.new, answer.method, answer.entry) == (f"{NEW}/copy-one/", "graph", True)
    assert answer.runner_up == f"{NEW}/copy-two/"


def test_a_short_page_renamed_and_reworded_is_found_by_its_path(tmp_path: Path) -> None:
    """Too short for its similarity to decide, a new title: its parent's links and the
    words of its path find it."""
    home = paragraphs(1)
    answers = answers_of(
        tmp_path,
        {
            "/index.html": old_page("Home", home, ("/support/contact-us.html",)),
            "/support/contact-us.html": old_page(
                "Contact", ["Write to the team at the usual address today."]
            ),
        },
        {
            "/index.html": new_page("Home", home, ("/support/contact-us/",)),
            "/support/contact-us/": new_page(
                "Get in touch", ["Write to the team at the usual address now."]
            ),
        },
    )
    answer = answers["/support/contact-us.html"]
    assert (answer.new, answer.method, answer.entry) == (
        f"{NEW}/support/contact-us/",
        "url-tokens",
        True,
    )


def test_a_removed_page_is_not_sent_to_its_closest_neighbour(tmp_path: Path) -> None:
    """Two pages sharing a third of their text: the one removed is not mapped to the other."""
    shared = paragraphs(1, count=2)
    kept = [*shared, *paragraphs(2, count=4)]
    gone = [*shared, *paragraphs(3, count=4)]
    answers = answers_of(
        tmp_path,
        {"/kept.html": old_page("Kept", kept), "/gone.html": old_page("Gone", gone)},
        {"/kept/": new_page("Kept", kept)},
    )
    assert mapping(answers) == {"/kept.html": "/kept/", "/gone.html": None}


def test_boilerplate_is_left_out_of_the_main_content() -> None:
    """The same text in two different frames has one main-content hash; the frames' words
    (navigation, cookie banner, footer date) are not in it."""
    text = paragraphs(1)
    old = match_features(old_page("Same", text, LINKS), f"{OLD}/same.html")
    new = match_features(new_page("Same", text, LINKS), f"{NEW}/same/")
    assert old.main_hash == new.main_hash
    assert old.main_length == new.main_length == 1 + 4 * 60  # the heading and the paragraphs
    assert new.headings == ("Same",)
    assert new.outlinks == tuple(NEW + link for link in LINKS)


def site(pages: dict[str, Page]) -> TestServer:
    return TestServer({**pages})


def test_two_crawled_sites_are_matched(tmp_path: Path) -> None:
    """Both sites served and crawled with ``scrapy crawl site`` into SQLite stores; the old
    site's own redirect is answered as its document."""
    install, config, notes = paragraphs(1), paragraphs(2), paragraphs(3)
    old = site(
        {
            "/": Page(
                old_page(
                    "Home", paragraphs(4), ("/install.html", "/config.html", "/go", "/notes.html")
                )
            ),
            "/install.html": Page(old_page("Installing", install, ("/",))),
            "/config.html": Page(old_page("Configuring", config, ("/",))),
            "/notes.html": Page(old_page("Release notes", notes, ("/",))),
            "/go": redirect("/install.html"),
        }
    )
    edited = [*config, "A sentence added while moving the page."]
    new = site(
        {
            "/": Page(new_page("Home", paragraphs(4), ("/docs/installing/", "/docs/configuring/"))),
            "/docs/installing/": Page(new_page("Installing", install, ("/",))),
            "/docs/configuring/": Page(new_page("Configuring", edited, ("/",))),
        }
    )
    stores = {}
    with old, new:
        for name, server in (("old", old), ("new", new)):
            store = tmp_path / f"{name}.sqlite"
            command = site_crawl_command(f"{server.url}/", store, "-s", "LOG_LEVEL=WARNING")
            result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stderr[-2000:]
            stores[name] = StoreReader.from_url(f"sqlite:///{store}")
    try:
        answers = match_sites(stores["old"], stores["new"])
    finally:
        for reader in stores.values():
            reader.close()
    found = {
        answer.old.removeprefix(old.url): (
            answer.new.removeprefix(new.url) if answer.new else None, answer.method, answer.entry
        )
        for answer in answers
    }  # fmt: skip
    assert found == {
        "/": ("/", "exact", True),
        "/install.html": ("/docs/installing/", "exact", True),
        "/config.html": ("/docs/configuring/", "near-content", True),
        "/notes.html": (None, "removed", False),
        "/go": ("/docs/installing/", "redirect", True),
    }


def test_match_features_round_trip_through_the_store(store_url: str) -> None:
    """What the crawl records of a page is what the matcher reads back (SQLite and
    PostgreSQL), written whether the features or the page come first."""
    text = old_page("Stored", paragraphs(1), LINKS)
    page = PageRecord(f"{OLD}/stored.html?utm_source=x", f"{OLD}/stored.html", None, 200)
    content = fingerprint_page(text.encode(), text, 200, None, "n2", page.final_url)
    writer = StoreWriter.from_url(store_url)
    writer.add_fingerprint(page, content)
    writer.flush()
    writer.add_page(page)
    writer.close()
    reader = StoreReader.from_url(store_url)
    try:
        (document,) = list(reader.documents())
    finally:
        reader.close()
    assert (document.fetch_url, document.status, document.kind) == (page.fetch_url, 200, "ok")
    assert document.features == content.features


def test_a_document_that_is_not_html_is_matched_by_its_whole_content(tmp_path: Path) -> None:
    """A download kept as it was under a new path is an entry; one gone is removed."""

    def write(store: Path, host: str, files: dict[str, bytes]) -> StoreReader:
        writer = StoreWriter.from_url(f"sqlite:///{store}")
        for path, body in files.items():
            page = PageRecord(host + path, host + path, None, 200)
            writer.add_page(page)
            writer.add_fingerprint(
                page, fingerprint_page(body, None, 200, None, "n2", page.final_url)
            )
        writer.close()
        return StoreReader.from_url(f"sqlite:///{store}")

    old = write(tmp_path / "old.sqlite", OLD, {"/a.pdf": b"%PDF-1 a", "/b.pdf": b"%PDF-1 b"})
    new = write(tmp_path / "new.sqlite", NEW, {"/files/a.pdf": b"%PDF-1 a"})
    try:
        answers = {answer.old: answer for answer in match_sites(old, new)}
    finally:
        old.close()
        new.close()
    kept, gone = answers[f"{OLD}/a.pdf"], answers[f"{OLD}/b.pdf"]
    assert (kept.new, kept.method, kept.entry) == (f"{NEW}/files/a.pdf", "exact", True)
    assert (gone.new, gone.method, gone.entry, gone.suggestion) == (None, "removed", False, "410")


def test_documents_are_named_in_their_canonical_spelling(tmp_path: Path) -> None:
    """A crawl keeps the first spelling of a URL it met (``//``, ``;jsessionid=``, ``%6e``,
    ``:80``): the answers name the page as a map should."""
    text = paragraphs(1)
    answers = answers_of(
        tmp_path,
        {"//guide//install.html;jsessionid=1A2B3C": old_page("Installing", text)},
        {":80/setup/i%6estalling/": new_page("Installing", text)},
    )
    (answer,) = answers.values()
    assert (answer.old, answer.new) == (f"{OLD}/guide/install.html", f"{NEW}/setup/installing/")
