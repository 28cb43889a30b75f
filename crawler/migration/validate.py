"""Checking a deployed redirect map against the live site: ``scrapy validate-map``.

A map (:func:`read_map`: the CSV of ``scrapy redirects --format bulk`` or ``--format csv``,
the review CSV or the JSONL of ``scrapy migration-map``) says where each source must send;
only its entries are checked, the other rows are listed as skipped. Sources and targets are
rebased onto the site under test (:class:`Rebase`: a staging copy, or production after the
launch). :class:`MapCheckSpider` fetches every source without following redirects, then each
hop itself, through the crawl's SSRF policy and Scrapy's politeness settings, and
:func:`judge` says what is wrong with each row (:data:`PROBLEMS`).

Pure but for the spider: reading and judging do no I/O beyond the map file.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit, urlunsplit

from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import load_object

from bloom_frontier.canonical import InvalidURL, canonicalize, resolve_link
from bloom_frontier.migration.answers import MigrationAnswer
from bloom_frontier.pagehints import (
    head_canonicals,
    header_noindex,
    link_header_canonicals,
    meta_noindex,
)
from bloom_frontier.pipelines.records import write_rows
from bloom_frontier.services import CrawlServices, services_of
from bloom_frontier.spiders.site import page_base
from bloom_frontier.ssrf import DNS_FAILURES

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from twisted.python.failure import Failure

    from bloom_frontier.ssrf import SSRFPolicy

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
TEMPORARY_STATUSES = frozenset({302, 303, 307})
GONE_STATUSES = frozenset({404, 410})
#: What can be wrong with a row, in the order reports list them.
PROBLEMS = {
    "blocked": "the SSRF guard refused a hop (a private or metadata address)",
    "robots": "robots.txt disallows a hop",
    "fetch-error": "a hop could not be fetched (connection, DNS, timeout)",
    "unfollowable": "a redirect without a usable Location",
    "not-redirecting": "the source answers without redirecting",
    "loop": "the redirects come back to a URL already visited",
    "too-many-hops": "more hops than REDIRECT_MAX_HOPS",
    "chain": "more than one hop to the final page",
    "temporary": "a hop is temporary (302, 303, 307) where the map wants a permanent one",
    "wrong-target": "the redirects never reach the map's target",
    "target-redirects": "the map's target itself redirects",
    "target-not-found": "the final page answers 404 or 410",
    "target-error": "the final page answers another status than 200",
    "noindex": "the final page may not be indexed (meta robots or X-Robots-Tag)",
    "canonical-elsewhere": "the final page's rel=canonical names another URL",
}
FORMATS = ("text", "html", "csv", "jsonl")
COLUMNS = (
    "line",
    "result",
    "source",
    "target",
    "hops",
    "final_url",
    "final_status",
    "indexable",
    "canonical",
    "self_canonical",
    "problems",
    "detail",
    "map_source",
    "map_target",
)
_TRUE = frozenset({"true", "1", "yes", "y", "x"})
_FALSE = frozenset({"false", "0", "no", "n", ""})


class MapInputError(ValueError):
    """The map or a base URL cannot be used; the message is the line the user reads."""


# --- the map ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MapRow:
    """One row of the map: where ``source`` must send; ``skip`` says why it is not checked."""

    line: int
    source: str
    target: str | None
    status: int | None = None  # the redirect status the map asks for, if it says
    skip: str | None = None


def _http_url(value: object, what: str, where: str) -> str:
    text = str(value or "").strip()
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise MapInputError(f"{where}: the {what} {text!r} is not an http(s) URL with a host")
    return text


def _status(value: object, where: str) -> int | None:
    text = str(value if value is not None else "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) not in REDIRECT_STATUSES:
        raise MapInputError(f"{where}: status {text!r} is not a redirect status (301, 302, ...)")
    return int(text)


def _flag(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value if value is not None else "").strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise MapInputError(f"{where}: entry {value!r} is neither true nor false")


def map_row(record: dict[str, Any], line: int, where: str) -> MapRow:
    """The :class:`MapRow` of one record: ``old``/``new`` (``scrapy migration-map``) or
    ``source``/``target`` (``scrapy redirects``, bulk maps), ``entry`` and ``status``
    optional (every row of a bulk map is an entry)."""
    if "old" in record:
        if isinstance(record.get("confidence"), (int, float)):  # a MigrationAnswer line
            try:
                answer = MigrationAnswer.from_json(record)
            except (TypeError, ValueError) as exc:
                raise MapInputError(f"{where}: not a migration answer ({exc})") from None
            record = {**record, "entry": answer.entry, "skip": answer.reason or answer.method}
        source, target = record.get("old"), record.get("new")
    elif "source" in record:
        source, target = record.get("source"), record.get("target")
    else:
        raise MapInputError(f"{where}: no source (columns source,target or old,new)")
    source = _http_url(source, "source", where)
    entry = _flag(record.get("entry", True), where)
    if not entry:
        reason = str(record.get("skip") or record.get("reason") or "").strip()
        return MapRow(line, source, str(target or "") or None, None, reason or "not an entry")
    return MapRow(
        line, source, _http_url(target, "target", where), _status(record.get("status"), where)
    )


def _lines(path: Path) -> list[str]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MapInputError(f"cannot read the map {path}: {exc.strerror or exc}") from None
    lines = []
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            lines.append(raw.decode("utf-8-sig" if number == 1 else "utf-8"))
        except UnicodeDecodeError:
            raise MapInputError(f"{path} line {number}: not UTF-8 text") from None
    return lines


def read_map(path: Path) -> list[MapRow]:
    """Every row of the map file ``path`` (JSONL when its first line is an object, else CSV
    with a header naming its columns, or ``source,target[,status]`` without one).
    :class:`MapInputError` names the line that cannot be read."""
    lines = _lines(path)
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise MapInputError(f"the map {path} is empty")
    if first.lstrip().startswith("{"):
        return list(_jsonl_rows(path, lines))
    return list(_csv_rows(path, lines))


def _jsonl_rows(path: Path, lines: list[str]) -> Iterator[MapRow]:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MapInputError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise MapInputError(f"{where}: not a JSON object")
        yield map_row(record, number, where)


def _csv_rows(path: Path, lines: list[str]) -> Iterator[MapRow]:
    header: list[str] | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            cells = next(csv.reader([line]))
        except csv.Error as exc:
            raise MapInputError(f"{where}: not CSV ({exc})") from None
        if header is None:
            names = [cell.strip().lower() for cell in cells]
            if "source" in names or "old" in names:
                header = names
                continue
            if "://" not in cells[0]:
                raise MapInputError(
                    f"{where}: no header naming the columns (source,target or old,new)"
                )
            header = ["source", "target", "status"][: len(cells)]
        if len(cells) > len(header):
            raise MapInputError(f"{where}: {len(cells)} cells, the header names {len(header)}")
        yield map_row(dict(zip(header, cells, strict=False)), number, where)


# --- rebasing ----------------------------------------------------------------------------


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` as stage 1 spells it (default port left out)."""
    try:
        parts = urlsplit(canonicalize(url))
    except InvalidURL:
        parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def base_origin(text: str, option: str) -> str:
    """The origin ``--base`` (or ``--target-base``) names; :class:`MapInputError` for
    anything but an http(s) URL with a host and no path, query or fragment."""
    parts = urlsplit(text.strip())
    if (
        parts.scheme.lower() not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise MapInputError(
            f"{option} {text!r} is not a site's address: give scheme and host "
            "(and port), no path, e.g. https://staging.example.com"
        )
    try:
        parts.port  # noqa: B018 (a bad port raises)
        canonicalize(text.strip())
    except (ValueError, InvalidURL) as exc:
        raise MapInputError(f"{option} {text!r} is not a valid URL ({exc})") from None
    return origin_of(text.strip())


def _moved(url: str, origin: str) -> str:
    parts, to = urlsplit(url), urlsplit(origin)
    return urlunsplit((to.scheme, to.netloc, parts.path or "/", parts.query, ""))


@dataclass(frozen=True)
class Rebase:
    """Where the map's URLs are fetched. Sources not on ``base`` move onto it (a staging
    check, or a map made on other hosts). Targets move onto ``target_base`` when it is given,
    else onto ``base`` when the sources moved: those on the new site (the origin most
    targets are on) or on the old site's origins; targets elsewhere are kept. A map whose
    sources are on ``base`` already keeps its targets as they are, without ``target_base``.
    """

    base: str
    target_base: str | None
    old_sites: frozenset[str]
    new_site: str | None

    @classmethod
    def of(cls, rows: Iterable[MapRow], base: str, target_base: str | None) -> Rebase:
        rows = [row for row in rows if row.skip is None]
        old_sites = frozenset(origin_of(row.source) for row in rows)
        targets = Counter(origin_of(row.target) for row in rows if row.target)
        if target_base is None and old_sites != {base}:
            target_base = base
        return cls(base, target_base, old_sites, targets.most_common(1)[0][0] if targets else None)

    def source(self, url: str) -> str:
        return url if origin_of(url) == self.base else _moved(url, self.base)

    def target(self, url: str) -> str:
        origin = origin_of(url)
        if self.target_base is None or origin == self.target_base:
            return url
        if origin not in self.old_sites and origin != self.new_site:
            return url
        return _moved(url, self.target_base)

    @property
    def hosts(self) -> list[str]:
        """The hosts the check was started on (exempt from the SSRF guard, as a crawl's)."""
        origins = (self.base, self.target_base or self.base)
        return sorted({urlsplit(origin).hostname or "" for origin in origins})


# --- what was fetched, and what is wrong with it ------------------------------------------


def same_url(first: str, second: str) -> bool:
    """One URL after stage-1 normalization (scheme and host case, default port, ``%``
    escapes, dot segments)."""
    try:
        return canonicalize(first) == canonicalize(second)
    except InvalidURL:
        return first == second


@dataclass(frozen=True)
class Hop:
    """One redirect: the status and where it sends (resolved; as sent if it cannot be)."""

    status: int
    url: str


@dataclass
class Walk:
    """One row being checked: the URLs it is fetched as, the hops seen so far, and how the
    walk ended (``end``: None while it goes on or once a page answered; else a problem)."""

    row: MapRow
    source: str
    target: str | None
    hops: list[Hop] = field(default_factory=list)
    final_url: str | None = None
    final_status: int | None = None
    noindex: bool = False
    canonicals: list[str] = field(default_factory=list)
    end: str | None = None
    detail: str = ""
    done: bool = False

    @property
    def urls(self) -> list[str]:
        return [self.source, *(hop.url for hop in self.hops)]


@dataclass(frozen=True)
class Verdict:
    """What the report says about one row."""

    walk: Walk
    problems: tuple[str, ...]

    @property
    def result(self) -> str:
        if self.walk.row.skip is not None:
            return "skipped"
        return "failed" if self.problems else "passed"

    @property
    def indexable(self) -> bool | None:
        if self.walk.final_status is None:
            return None
        return self.walk.final_status == 200 and not self.walk.noindex

    @property
    def self_canonical(self) -> bool | None:
        """True: the page names itself; False: another URL; None: no canonical (or no page)."""
        walk = self.walk
        if not walk.canonicals or walk.final_url is None:
            return None
        return all(same_url(url, walk.final_url) for url in walk.canonicals)

    def as_dict(self) -> dict[str, Any]:
        """The row as the csv and jsonl reports write it (csv: hops as ``status URL | ...``)."""
        walk = self.walk
        return {
            "line": walk.row.line,
            "result": self.result,
            "source": walk.source,
            "target": walk.target,
            "hops": [{"status": hop.status, "url": hop.url} for hop in walk.hops],
            "final_url": walk.final_url,
            "final_status": walk.final_status,
            "indexable": self.indexable,
            "canonical": walk.canonicals[0] if walk.canonicals else None,
            "self_canonical": self.self_canonical,
            "problems": list(self.problems),
            "detail": walk.detail or walk.row.skip or "",
            "map_source": walk.row.source,
            "map_target": walk.row.target,
        }


def judge(walk: Walk) -> Verdict:
    """What is wrong with a finished walk (:data:`PROBLEMS`, in that order)."""
    if walk.row.skip is not None:
        return Verdict(walk, ())
    found: set[str] = set()
    if walk.end is not None:
        found.add(walk.end)
    permanent_wanted = walk.row.status not in TEMPORARY_STATUSES
    if permanent_wanted and any(hop.status in TEMPORARY_STATUSES for hop in walk.hops):
        found.add("temporary")
    if walk.end is None:
        if not walk.hops:
            found.add("not-redirecting")
        else:
            found |= _landing_problems(walk)
    return Verdict(walk, tuple(name for name in PROBLEMS if name in found))


def _landing_problems(walk: Walk) -> set[str]:
    """A walk that redirected and ended on a page: chain, target, final page."""
    found = {"chain"} if len(walk.hops) > 1 else set()
    assert walk.target is not None
    reached = [i for i, hop in enumerate(walk.hops) if same_url(hop.url, walk.target)]
    if not reached:
        found.add("wrong-target")
    elif reached[0] < len(walk.hops) - 1:
        found.add("target-redirects")
    if walk.final_status in GONE_STATUSES:
        found.add("target-not-found")
    elif walk.final_status != 200:
        found.add("target-error")
    else:
        verdict = Verdict(walk, ())
        if walk.noindex:
            found.add("noindex")
        if verdict.self_canonical is False:
            found.add("canonical-elsewhere")
    return found


# --- fetching ----------------------------------------------------------------------------


class MapCheckSpider(Spider):
    """Fetches each map row's source and then each hop itself (no automatic redirects),
    through the crawl's SSRF policy; :attr:`verdicts` holds every row's, in map order, once
    the crawl is over.

    Runs with the project's settings (politeness: ``DOWNLOAD_DELAY``, concurrency per
    domain, AutoThrottle, ``ROBOTSTXT_OBEY``, retries, ``USER_AGENT``) but without the
    frontier add-on: a check is not a crawl of the site, so nothing is deduplicated, queued
    in Redis or written to the record store. The crawl services give the SSRF policy.
    """

    name = "validate-map"

    def __init__(self, rows: list[MapRow], rebase: Rebase, max_hops: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.walks = [
            Walk(
                row,
                rebase.source(row.source),
                rebase.target(row.target) if row.target else None,
            )
            for row in rows
        ]
        self.max_hops = max_hops
        #: Hosts the check was started on: exempt from the SSRF guard, like a crawl's.
        self.allowed_hosts = rebase.hosts

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        """The project's settings without the frontier add-on; the crawl services alone
        (for the SSRF policy), learning nothing."""
        super().update_settings(settings)
        from bloom_frontier.addon import BloomFrontierAddon

        priority = SETTINGS_PRIORITIES["spider"]
        addons = {
            name: order
            for name, order in settings.getdict("ADDONS").items()
            if (load_object(name) if isinstance(name, str) else name) is not BloomFrontierAddon
        }
        settings.set("ADDONS", addons, priority)
        extensions = settings.getdict("EXTENSIONS")
        settings.set("EXTENSIONS", {**extensions, CrawlServices: 530}, priority)
        settings.set("CANON_LEARN", "off", priority)

    @property
    def policy(self) -> SSRFPolicy:
        return services_of(self.crawler).ssrf_policy

    @property
    def verdicts(self) -> list[Verdict]:
        return [judge(walk) for walk in self.walks]

    async def start(self) -> AsyncIterator[Request]:
        for walk in self.walks:
            if walk.row.skip is None:
                request = self.fetch(walk, walk.source)
                if request is not None:
                    yield request

    def fetch(self, walk: Walk, url: str) -> Request | None:
        """The request for the walk's next URL; None when the SSRF policy refuses it."""
        refusal = self.policy.refusal(url)
        if refusal is not None:
            self.finish(walk, "blocked", f"SSRF guard refused {url} ({refusal})")
            return None
        return Request(
            url,
            callback=self.answered,
            errback=self.failed,
            dont_filter=True,
            meta={"dont_redirect": True, "handle_httpstatus_all": True},
            cb_kwargs={"walk": walk},
        )

    def finish(self, walk: Walk, end: str | None, detail: str = "") -> None:
        walk.end, walk.detail, walk.done = end, detail, True

    def answered(self, response: Response, walk: Walk) -> Iterator[Request]:
        location = response.headers.get("Location")
        if response.status not in REDIRECT_STATUSES or not location:
            self.landed(response, walk)
            return
        sent = location.decode("utf-8", "surrogateescape")
        target = resolve_link(response.url, sent)
        walk.hops.append(Hop(response.status, target or sent))
        if target is None:
            self.finish(walk, "unfollowable", f"Location {sent!r}")
        elif any(same_url(target, url) for url in walk.urls[:-1]):
            self.finish(walk, "loop", f"back to {target}")
        elif len(walk.hops) >= self.max_hops:
            self.finish(walk, "too-many-hops", f"{len(walk.hops)} hops")
        else:
            request = self.fetch(walk, target)
            if request is not None:
                yield request

    def landed(self, response: Response, walk: Walk) -> None:
        """The walk ends on a page: its status, robots directives and canonicals."""
        walk.final_url, walk.final_status = response.url, response.status
        walk.noindex = header_noindex(response.headers.getlist("X-Robots-Tag"))
        hrefs = [
            (response.url, href)
            for href in link_header_canonicals(response.headers.getlist("Link"))
        ]
        if isinstance(response, HtmlResponse):
            walk.noindex = walk.noindex or meta_noindex(response)
        if isinstance(response, TextResponse) and (found := head_canonicals(response)):
            base = page_base(response)
            hrefs += [(base, href) for href in found]
        walk.canonicals = [url for base, href in hrefs if (url := resolve_link(base, href))]
        self.finish(walk, None)

    def failed(self, failure: Failure) -> None:
        request = failure.request  # type: ignore[attr-defined]
        walk: Walk = request.cb_kwargs["walk"]
        error = failure.value
        host = urlsplit(request.url).hostname or ""
        if failure.check(*DNS_FAILURES) and (refused := self.policy.name_refusal(host)):
            self.finish(walk, "blocked", f"SSRF guard refused {host} (dns:{refused})")
        elif isinstance(error, IgnoreRequest) and "robots.txt" in str(error):
            self.finish(walk, "robots", f"robots.txt disallows {request.url}")
        else:
            detail = f"{request.url}: {type(error).__name__}: {str(error).rstrip('.')}"
            self.finish(walk, "fetch-error", detail)


def unreachable(verdicts: list[Verdict]) -> str | None:
    """Why the site could not be reached at all (every checked row failed on its source's
    download), or None."""
    checked = [v.walk for v in verdicts if v.walk.row.skip is None]
    if checked and all(walk.end == "fetch-error" and not walk.hops for walk in checked):
        return checked[0].detail
    return None


# --- reports -----------------------------------------------------------------------------


def summary(verdicts: list[Verdict]) -> str:
    """The one line that ends every report."""
    results = Counter(verdict.result for verdict in verdicts)
    problems = Counter(name for verdict in verdicts for name in verdict.problems)
    line = (
        f"validate-map: {results['passed'] + results['failed']} rows checked, "
        f"{results['passed']} passed, {results['failed']} failed"
    )
    if problems:
        counts = (f"{name} {problems[name]}" for name in PROBLEMS if problems[name])
        line += f" ({', '.join(counts)})"
    return line + f", {results['skipped']} skipped"


def _hops_text(walk: Walk) -> str:
    return " | ".join(f"{hop.status} {hop.url}" for hop in walk.hops)


def _page_text(verdict: Verdict) -> str:
    walk = verdict.walk
    if walk.final_status is None:
        return walk.detail
    canonical = {True: "self-canonical", False: "canonical elsewhere", None: "no canonical"}
    indexable = "indexable" if verdict.indexable else "not indexable"
    return (
        f"final {walk.final_status} {walk.final_url} "
        f"({indexable}, {canonical[verdict.self_canonical]})"
    )


def write_text(verdicts: list[Verdict], out: TextIO) -> None:
    """One line per row (``ok``, ``FAIL`` with its problems, ``skip`` with why)."""
    for verdict in verdicts:
        walk = verdict.walk
        if verdict.result == "skipped":
            out.write(f"skip line {walk.row.line}: {walk.row.source}: {walk.row.skip}\n")
            continue
        head = "ok  " if verdict.result == "passed" else "FAIL"
        problems = f" [{', '.join(verdict.problems)}]" if verdict.problems else ""
        hops = _hops_text(walk) or "no redirect"
        out.write(
            f"{head} line {walk.row.line}: {walk.source}{problems}: {hops}; {_page_text(verdict)}\n"
        )
    out.write(summary(verdicts) + "\n")


def write_table(verdicts: list[Verdict], fmt: str, out: TextIO) -> None:
    """One row per source, csv (hops as ``status URL | ...``) or jsonl."""

    def rows() -> Iterator[dict[str, Any]]:
        for verdict in verdicts:
            row = verdict.as_dict()
            if fmt == "csv":
                row["hops"] = _hops_text(verdict.walk)
                row["problems"] = " ".join(row["problems"])
            yield row

    write_rows(rows(), fmt, COLUMNS, out)


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:4px 6px;
vertical-align:top;text-align:left;word-break:break-all}th{background:#eee}
tr.failed td.result{background:#fdd}tr.passed td.result{background:#dfd}
tr.skipped{color:#777}code{font-size:12px}ul{margin:0;padding-left:1.2em}
"""


def write_html(verdicts: list[Verdict], out: TextIO, title: str) -> None:
    """A self-contained page (no script, style or font from elsewhere): the summary, what
    each problem means, and one table row per source."""
    esc = html.escape
    problems = Counter(name for verdict in verdicts for name in verdict.problems)
    legend = "".join(
        f"<li><b>{esc(name)}</b> ({problems[name]}): {esc(text)}</li>"
        for name, text in PROBLEMS.items()
        if problems[name]
    )
    body = io.StringIO()
    for verdict in verdicts:
        walk = verdict.walk
        hops = "".join(f"<li>{hop.status} <code>{esc(hop.url)}</code></li>" for hop in walk.hops)
        body.write(
            f'<tr class="{verdict.result}"><td>{walk.row.line}</td>'
            f'<td class="result">{verdict.result}</td>'
            f"<td><code>{esc(walk.source)}</code></td>"
            f"<td><code>{esc(walk.target or '')}</code></td>"
            f"<td><ul>{hops}</ul></td><td>{esc(_page_text(verdict))}</td>"
            f"<td>{esc(' '.join(verdict.problems) or walk.row.skip or '')}</td></tr>\n"
        )
    out.write(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>"
        f'<h1>{esc(title)}</h1><p id="summary">{esc(summary(verdicts))}</p>'
        f'<ul id="problems">{legend}</ul>'
        "<table><thead><tr><th>line</th><th>result</th><th>source</th><th>target</th>"
        "<th>hops</th><th>final page</th><th>problems</th></tr></thead><tbody>\n"
        f"{body.getvalue()}</tbody></table></body></html>\n"
    )
