"""``scrapy migration-map --old STORE_URL --new STORE_URL``: every old document of one crawl
sent to the page of another crawl that now holds its content.

The matcher (:func:`bloom_frontier.migration.matching.match_sites`) gives one answer per old
document; this command checks the two stores first (both there, not the same one, each with
pages), then applies what the user asked (``--host``: the targets moved from a staging host to
the public one; ``--min-confidence``; ``--reviewed``: a person's decisions, see
:mod:`bloom_frontier.migration.review`) and writes one format
(:mod:`bloom_frontier.migration.formats`). What a format leaves out, the review's notes and
a one-line summary go to stderr; the map to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from scrapy.commands import ScrapyCommand
from scrapy.settings import Settings
from sqlalchemy import exc as sql_errors

from bloom_frontier.canonical.rules import RuleSet, rules_from_settings
from bloom_frontier.commands._failures import CommandFailed, fails_cleanly
from bloom_frontier.commands._records import add_format_option, add_max_regex_option
from bloom_frontier.migration.answers import MigrationAnswer
from bloom_frontier.migration.formats import (
    ANSWER_COLUMNS,
    FORMATS,
    server_rows,
    write_review_csv,
    write_review_page,
)
from bloom_frontier.migration.review import ReviewError, apply_review, read_review
from bloom_frontier.pipelines.database import StoreMissing
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import write_rows
from bloom_frontier.redirectmap.matching import Unmatchable, request_key
from bloom_frontier.redirectmap.servermap import write_server_map

#: ``match_sites(old, new, progress)``: one answer per old document.
Matcher = Callable[[StoreReader, StoreReader, Callable[[str], None] | None], list[MigrationAnswer]]


def store_url(given: str) -> str:
    """``--old`` / ``--new`` as a store URL: a bare path is a SQLite file.

    >>> store_url("postgresql://u@h/old"), store_url("/data/old.sqlite")
    ('postgresql://u@h/old', 'sqlite:////data/old.sqlite')
    """
    if "://" in given:
        return given
    return f"sqlite:///{Path(given).expanduser().resolve()}"


@contextlib.contextmanager
def opened(role: str, given: str | None) -> Iterator[StoreReader]:
    """The ``role`` (``old`` or ``new``) crawl's store, closed when the block ends."""
    if not given:
        raise CommandFailed(
            f"--{role} STORE_URL is required: the record store of the {role} site's crawl"
        )
    try:
        store = StoreReader.for_reading(Settings({"STORE_URL": store_url(given)}))
    except StoreMissing:
        raise CommandFailed(
            f"--{role}: no record store at {given}: crawl the {role} site into it first "
            f"(scrapy crawl site -a start_url=URL -s STORE_URL={store_url(given)})"
        ) from None
    except sql_errors.SQLAlchemyError as exc:
        cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise CommandFailed(f"--{role}: cannot use {given} as a record store ({cause})") from None
    try:
        yield store
    finally:
        store.close()


def same_store(old: StoreReader, new: StoreReader) -> bool:
    """Whether both are one database (the same SQLite file by any path, or one URL)."""
    if old.database.path and new.database.path:
        return os.path.samefile(old.database.path, new.database.path)
    return old.database.engine.url == new.database.engine.url


def fetched_pages(role: str, store: StoreReader, given: str) -> list[dict[str, Any]]:
    """The pages the crawl fetched with status 200; none is an error."""
    pages = [page for page in store.pages() if page["status"] == 200]
    if not pages:
        raise CommandFailed(
            f"--{role}: the store {given} holds no page fetched with status 200: crawl the "
            f"{role} site into it first"
        )
    return pages


def parse_confidence(given: str | None) -> float | None:
    """``--min-confidence`` as a number within 0..1."""
    if given is None:
        return None
    try:
        value = float(given)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise CommandFailed(f"--min-confidence {given}: a number from 0 to 1, e.g. 0.9")
    return value


def parse_host(given: str | None) -> tuple[str | None, str] | None:
    """``--host``: (scheme or None, host[:port])."""
    if given is None:
        return None
    parts = urlsplit(given if "://" in given else f"//{given}")
    if not parts.hostname or parts.path not in ("", "/") or parts.query or parts.username:
        raise CommandFailed(
            f"--host {given}: a host name (www.example.com, host:port or "
            "https://www.example.com), no path"
        )
    if parts.scheme and parts.scheme not in ("http", "https"):
        raise CommandFailed(f"--host {given}: the scheme is http or https")
    return parts.scheme or None, parts.netloc


def below_confidence(answers: Iterable[MigrationAnswer], minimum: float) -> list[MigrationAnswer]:
    """Entries less confident than ``minimum`` taken out of the map (kept for review)."""
    return [
        dataclasses.replace(
            answer,
            entry=False,
            reason=f"confidence {answer.confidence:.3f} below --min-confidence {minimum}"
            + (f"; {answer.reason}" if answer.reason else ""),
        )
        if answer.entry and answer.confidence < minimum
        else answer
        for answer in answers
    ]


Move = Callable[[str | None], str | None]


def host_mover(new_pages: Iterable[dict[str, Any]], host: tuple[str | None, str]) -> Move:
    """What ``--host`` does to a URL: one of the new crawl's moved to ``host`` (the new site
    crawled on a staging host, deployed on another); any other kept as it is."""
    hosts = {urlsplit(str(page["final_url"])).netloc for page in new_pages}
    if len(hosts) != 1:
        raise CommandFailed(
            f"--host: the new crawl's pages are on {len(hosts)} hosts "
            f"({', '.join(sorted(hosts))}): --host moves one"
        )
    (crawled,) = hosts
    scheme, netloc = host

    def move(url: str | None) -> str | None:
        if url is None or "://" not in url:
            return url  # None, or a suggestion of "410"
        parts = urlsplit(url)
        if parts.netloc != crawled:
            return url
        return urlunsplit(parts._replace(scheme=scheme or parts.scheme, netloc=netloc))

    return move


def rebased(answers: Iterable[MigrationAnswer], move: Move) -> list[MigrationAnswer]:
    """Every URL of the new crawl in the answers (``new``, ``runner_up``, ``suggestion``)
    moved by ``move`` (:func:`host_mover`)."""
    return [
        dataclasses.replace(
            answer,
            new=move(answer.new),
            runner_up=move(answer.runner_up),
            suggestion=move(answer.suggestion),
        )
        for answer in answers
    ]


def unfetched_targets(answers: Iterable[MigrationAnswer], new_urls: Iterable[str]) -> list[str]:
    """The reviewed entries whose target the new crawl never fetched (a typo would send
    users to a 404); said, not dropped: a reviewer may send a page off the site on purpose."""
    fetched = set(new_urls)
    return [
        f"{answer.old}: the reviewed target {answer.new} is no page the new crawl fetched"
        for answer in answers
        if answer.method == "reviewed" and answer.entry and answer.new not in fetched
    ]


def shadowing(
    answers: Iterable[MigrationAnswer], new_urls: Iterable[str], rules: RuleSet
) -> list[MigrationAnswer]:
    """Entries whose old URL is a page of the new site too (the same host, the path reused)
    taken out of the map: a server would answer the redirect instead of that page, hiding
    it. Matched as a server matches a source (:func:`request_key`)."""
    pages = set()
    for url in new_urls:
        with contextlib.suppress(Unmatchable):
            pages.add(request_key(url, rules).page)

    def hides(answer: MigrationAnswer) -> bool:
        try:
            return answer.entry and request_key(answer.old, rules).page in pages
        except Unmatchable:
            return False

    return [
        dataclasses.replace(
            answer,
            entry=False,
            reason="the new site has a page at this URL: a redirect would hide it"
            + (f"; {answer.reason}" if answer.reason else ""),
        )
        if hides(answer)
        else answer
        for answer in answers
    ]


def summary(answers: list[MigrationAnswer]) -> str:
    """The one line said at the end: how many old documents, entries by method, the rest."""
    entries = Counter(answer.method for answer in answers if answer.entry)
    rest = Counter(answer.method for answer in answers if not answer.entry)
    methods = ", ".join(f"{method} {count}" for method, count in entries.most_common())
    removed, ambiguous = rest.pop("removed", 0), rest.pop("ambiguous", 0)
    return (
        f"{len(answers)} old documents: {entries.total()} map entries"
        + (f" ({methods})" if methods else "")
        + f", {removed} removed, {ambiguous} ambiguous (for review), "
        f"{rest.total()} not entries for another reason"
    )


def say(text: str) -> None:
    print(f"migration-map: {text}", file=sys.stderr, flush=True)


def default_matcher() -> Matcher:
    """The project's matcher, imported only when a map is made."""
    from bloom_frontier.migration.matching import match_sites

    return match_sites


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_ENABLED": False}
    #: The matcher to use (None: :func:`default_matcher`'s).
    matcher: Matcher | None = None

    def syntax(self) -> str:
        return (
            "--old STORE_URL --new STORE_URL [--format jsonl|csv|bulk|nginx|apache|html] "
            "[--reviewed FILE] [--min-confidence X] [--host HOST] [--max-regex N]"
        )

    def short_desc(self) -> str:
        return "Map every old page of one crawl to the page of another that holds its content"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--old", metavar="STORE_URL", help="the old site's crawl (its store)")
        parser.add_argument("--new", metavar="STORE_URL", help="the new site's crawl (its store)")
        add_format_option(parser, FORMATS)
        parser.add_argument(
            "--reviewed",
            metavar="FILE",
            help="the review CSV (--format csv) with its decision column filled: applied",
        )
        parser.add_argument(
            "--min-confidence",
            metavar="X",
            help="entries less confident than X (0..1) are left out of the map",
        )
        parser.add_argument(
            "--host",
            help="the host the new site is deployed on, when it was crawled on another (staging)",
        )
        add_max_regex_option(parser)

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        minimum = parse_confidence(opts.min_confidence)
        host = parse_host(opts.host)
        review = None
        if opts.reviewed:
            try:
                review = read_review(opts.reviewed, ANSWER_COLUMNS)
            except ReviewError as exc:
                raise CommandFailed(str(exc)) from None
        with opened("old", opts.old) as old, opened("new", opts.new) as new:
            if same_store(old, new):
                raise CommandFailed(
                    f"--old and --new are the same store ({opts.old}): crawl each site into "
                    "a store of its own"
                )
            old_pages = fetched_pages("old", old, opts.old)
            new_pages = fetched_pages("new", new, opts.new)
            move = host_mover(new_pages, host) if host is not None else None
            matcher = self.matcher or default_matcher()
            answers = matcher(old, new, say)
        new_urls = [str(page["final_url"]) for page in new_pages]
        if move is not None:
            answers = rebased(answers, move)
            new_urls = [str(move(url)) for url in new_urls]
        rules = rules_from_settings(self.settings)
        if minimum is not None:
            answers = below_confidence(answers, minimum)
        decisions: dict[str, str] = {}
        extra: dict[str, dict[str, str]] = {}
        if review is not None:
            applied = apply_review(answers, review)
            answers, decisions, extra = applied.answers, applied.decisions, applied.extra
            for note in applied.notes + unfetched_targets(answers, new_urls):
                say(note)
        answers = shadowing(answers, new_urls, rules)
        self.write(
            opts,
            answers,
            rules,
            [str(page["final_url"]) for page in old_pages] + new_urls,
            decisions,
            extra,
            review.extra_columns if review else (),
        )
        say(summary(answers))

    def write(
        self,
        opts: argparse.Namespace,
        answers: list[MigrationAnswer],
        rules: RuleSet,
        known_urls: list[str],
        decisions: dict[str, str],
        extra: dict[str, dict[str, str]],
        extra_columns: tuple[str, ...],
    ) -> None:
        """Write ``answers`` in the chosen format to stdout (``known_urls``: both crawls'
        pages, where they are served: nginx gives a source with a case-only twin among them
        a case-sensitive entry, so that the twin is not redirected too)."""
        out = sys.stdout
        if opts.format == "jsonl":
            write_rows((answer.as_json() for answer in answers), "jsonl", (), out)
        elif opts.format == "csv":
            write_review_csv(answers, out, decisions, extra, extra_columns)
        elif opts.format == "html":
            site = " \u2192 ".join(
                ", ".join(sorted({urlsplit(url).netloc for url in urls if url}))
                for urls in ([a.old for a in answers], [a.new for a in answers])
            )
            written = datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%d %H:%M UTC")
            write_review_page(answers, out, site, f"report written {written}", decisions)
        else:
            rows = server_rows(answers, rules)
            written = write_server_map(rows, opts.format, out, rules, known_urls, opts.max_regex)
            for problem in written.left_out:
                say(problem)
