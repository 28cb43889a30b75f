"""The redirect audit report (``scrapy redirects --format html``): one self-contained page
(inline CSS and SVG, nothing loaded from anywhere) for the person planning a migration.

Each category is a function of the csv/jsonl export's columns (:data:`CATEGORIES`), so the
counts on the page are the counts a script gets from the export; the canonical category is a
function of ``scrapy canonicals``' export (:func:`canonical_problem`). Every row names the page
that linked to its source (:func:`linked_from`); the sources of one redirect spiral (every hop
a new URL, up to the hop cap) are listed as one row naming their pattern (:func:`spirals`).
"""

from __future__ import annotations

import html
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from bloom_frontier.pipelines.reader import StoredChain
from bloom_frontier.pipelines.records import BLOCKED, ERROR, FETCHED, LOOP, TOO_MANY_HOPS
from bloom_frontier.redirectmap.semantics import DEAD_ENDS, UNRESOLVED, SourceRow

#: Rows listed per category on the page (the count is always the full count).
MAX_LISTED = 500

Row = Mapping[str, Any]


def _statuses(row: Row) -> list[int]:
    return [int(status) for status in str(row["hop_statuses"]).split()]


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


#: (id, title, what it means, which export rows belong to it).
CATEGORIES: tuple[tuple[str, str, str, Callable[[Row], bool]], ...] = (
    (
        "multi-hop",
        "Chains to flatten",
        "More than one hop before the page: each hop costs a round trip and link equity.",
        lambda row: row["outcome"] == FETCHED and int(row["hops"]) > 1,
    ),
    (
        "temporary-inside-permanent",
        "Temporary hops inside permanent chains",
        "A 302/307 (or refresh) among permanent hops: the whole chain is temporary.",
        lambda row: (
            any(s in (301, 308) for s in _statuses(row))
            and any(s not in (301, 308) for s in _statuses(row))
        ),
    ),
    (
        "loops",
        "Redirect loops",
        "The chain comes back to a URL it passed.",
        lambda row: row["outcome"] == LOOP,
    ),
    (
        "blocked",
        "Redirects to blocked or private addresses",
        "Private, loopback, link-local or cloud-metadata targets: never followed, never mapped.",
        lambda row: row["outcome"] == BLOCKED,
    ),
    (
        "error-end",
        "Chains ending in 4xx/5xx",
        "The page at the end answers an error: the redirect leads nowhere.",
        lambda row: row["outcome"] == FETCHED and int(row["final_status"] or 0) >= 400,
    ),
    (
        "soft-404",
        "Chains flagged soft-404",
        "Ends on a login page, country selector or the home page: probably not the moved page.",
        lambda row: bool(row["flag"]),
    ),
    (
        "dead-end",
        "Other dead ends",
        "Too many hops, download errors, or ends the crawl never resolved.",
        lambda row: row["outcome"] in DEAD_ENDS and row["outcome"] not in (LOOP, BLOCKED),
    ),
)


def why_no_target(row: Row) -> str:
    """What the "target (or why none)" column says of a row without a target."""
    reason = row.get("reason")
    outcome = row["outcome"]
    if outcome == LOOP:
        return f"loop: comes back to {row['urls'][-1]}" if row.get("urls") else "loop"
    if outcome == BLOCKED:
        return f"blocked: {reason or 'private address'}"
    if outcome == ERROR:
        return f"error: {reason or 'download failed'}"
    if outcome == TOO_MANY_HOPS:
        return "more hops than REDIRECT_MAX_HOPS: the end was never fetched"
    if outcome == UNRESOLVED:
        return "unresolved: the crawl never fetched where it ends"
    return reason or outcome


def arrivals(rows: Iterable[Row]) -> dict[str, str]:
    """Each URL some chain was redirected to, and the URL redirecting to it (the first one
    listed)."""
    found: dict[str, str] = {}
    for row in rows:
        urls = row.get("urls") or ()
        for before, after in itertools.pairwise(urls):
            found.setdefault(after, before)
    return found


def linked_from(row: Row, arrived_from: Mapping[str, str]) -> str:
    """What the "linked from" column says: the page whose link was followed to the source
    (the stored referrer), else how the source was reached (``arrived_from``:
    :func:`arrivals`)."""
    if row.get("referrer"):
        return str(row["referrer"])
    if row["source"] in arrived_from:
        return f"no link: reached by redirect from {arrived_from[row['source']]}"
    return "none recorded: a start URL, or no Referer was sent"


def hop_list(row: Row) -> str:
    """Each hop as ``status -> URL`` on its own line (the URLs the chain passed)."""
    urls = row.get("urls") or ()
    statuses = str(row["hop_statuses"]).split()
    return "\n".join(
        f"{status} \u2192 {url}" for status, url in zip(statuses, urls[1:], strict=False)
    )


#: Characters a URL pattern's fixed parts end (or start) at: ``?x=1`` and ``?x=12`` give
#: ``?x=*``, not ``?x=1*``.
DELIMITERS = "/?&=#;:.,-_~+"


def _common_start(texts: Sequence[str]) -> str:
    """The characters every text starts with."""
    first, last = min(texts), max(texts)
    size = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), None)
    return first if size is None else first[:size]


def url_pattern(urls: Sequence[str]) -> str:
    """The URLs as one pattern: what they all start and end with around a ``*``, each part
    cut at a delimiter.

    >>> url_pattern(["https://e.org/a?x=1", "https://e.org/a?x=2", "https://e.org/a?x=10"])
    'https://e.org/a?x=*'
    >>> url_pattern(["https://e.org/p/1/", "https://e.org/p/1/x/", "https://e.org/p/1/x/x/"])
    'https://e.org/p/1/*'
    >>> url_pattern(["https://e.org/s12/index", "https://e.org/s13/index"])
    'https://e.org/*/index'
    """
    head = _common_start(urls)
    room = min(len(url) for url in urls) - len(head)
    tail = _common_start([url[::-1] for url in urls])[:room][::-1]
    if head and head[-1] not in DELIMITERS:
        head = head[: max(head.rfind(c) for c in DELIMITERS) + 1]
    if tail and tail[0] not in DELIMITERS:
        cuts = [i for i, c in enumerate(tail) if c in DELIMITERS]
        tail = tail[cuts[0] :] if cuts else ""
    return f"{head}*{tail}"


def spirals(rows: Iterable[Row]) -> list[list[Row]]:
    """The sources of each redirect spiral, its first source first: rows that ended past the
    hop cap (each hop a new URL) and share URLs, since every hop of a spiral is a source of
    its own. Groups of one row are left out."""
    groups: list[tuple[set[str], list[Row]]] = []
    for row in rows:
        if row["outcome"] != TOO_MANY_HOPS:
            continue
        urls = set(row.get("urls") or (row["source"],))
        touching = [group for group in groups if group[0] & urls]
        members = [row] + [member for _, group_rows in touching for member in group_rows]
        groups = [group for group in groups if all(group is not t for t in touching)]
        groups.append((urls.union(*(urls for urls, _ in touching)), members))
    return [
        sorted(members, key=lambda row: -int(row["hops"]))
        for _, members in groups
        if len(members) > 1
    ]


def why_spiral(group: Sequence[Row]) -> str:
    """Why a spiral (:func:`spirals`) has no target: its pattern and length."""
    first = group[0]
    return (
        f"spiral {url_pattern(first['urls'])}: every hop leads to a new URL; stopped at the "
        f"hop cap after {first['hops']} hops (REDIRECT_MAX_HOPS), so its end was never "
        f"fetched: no target for its {len(group)} sources"
    )


def variant_groups(rows: Iterable[Row]) -> list[list[Row]]:
    """Sources that are variants of one page (one dedupe key, several URLs)."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        if row["source_key"]:
            groups.setdefault(str(row["source_key"]), []).append(row)
    return [group for group in groups.values() if len(group) > 1]


def canonical_problem(
    hint: Row, redirect_keys: set[str], page_status: Mapping[str, int]
) -> str | None:
    """Why a valid canonical hint points at the wrong URL: ``redirects`` (its URL is a
    redirect source) or ``status-<n>`` (it was fetched with a status other than 200)."""
    key = hint.get("canonical_key")
    if not hint.get("valid") or not key:
        return None
    if key in redirect_keys:
        return "redirects"
    status = page_status.get(str(key))
    return f"status-{status}" if status is not None and status != 200 else None


def canonical_judge(
    chains: Iterable[StoredChain], pages: Iterable[Row]
) -> Callable[[Row], str | None]:
    """:func:`canonical_problem` over the store's redirect sources and fetched pages."""
    redirect_keys = {hop.source_key for chain in chains for hop in chain.hops if hop.source_key}
    page_status = {str(page["key"]): int(page["status"]) for page in pages if page["key"]}
    return lambda hint: canonical_problem(hint, redirect_keys, page_status)


def use_instead(hint: Row, problem: str, rows: Iterable[SourceRow]) -> str:
    """The URL a canonical hint should name: where its redirect ends, when it does."""
    if problem != "redirects":
        return "a URL that answers 200"
    for row in rows:
        if row.source_key == hint.get("canonical_key") or row.source == hint.get("canonical_url"):
            if row.target:
                return row.target
            return f"none: its redirect ends as {row.skip or row.outcome}"
    return "where its redirect ends"


def canonical_problems(
    hints: Iterable[Row], judge: Callable[[Row], str | None]
) -> list[tuple[Row, str]]:
    """Each distinct valid hint pointing at a redirecting or non-200 URL, with why (one per
    page and canonical, as ``scrapy canonicals`` lists them)."""
    found: dict[tuple[str, str], tuple[Row, str]] = {}
    for hint in hints:
        problem = judge(hint)
        if problem:
            found.setdefault((hint["page_url"], hint["canonical_url"]), (hint, problem))
    return list(found.values())


STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;
color:#1d2330}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin:2rem 0 .3rem}
.lede{color:#566} .summary{display:flex;flex-wrap:wrap;gap:.6rem;margin:1.2rem 0}
.card{border:1px solid #d5dbe3;border-radius:8px;padding:.5rem .8rem;min-width:9rem;
text-decoration:none;color:inherit}
.card .count{display:block;font-size:1.5rem;font-weight:650}
.card.bad .count{color:#b3261e} .card.ok .count{color:#1b7f3b} .card.none .count{color:#8a94a3}
summary{cursor:pointer;color:#3b6fd8;margin:.3rem 0}
.charts{display:flex;flex-wrap:wrap;gap:2rem} figure{margin:0}
figcaption{font-weight:600;margin-bottom:.3rem}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #e5e9ef;vertical-align:top}
td.url{word-break:break-all;font-family:ui-monospace,monospace;white-space:pre-line}
th{background:#f4f6f9}
p.more{color:#566;font-style:italic}
th[data-sort]{cursor:pointer} th[data-sort="asc"]::after{content:" \\25B2"}
th[data-sort="desc"]::after{content:" \\25BC"}
input#filter{font:inherit;width:100%;max-width:32rem;padding:.3rem .5rem}
"""

#: Sorting (click a column's header; numbers as numbers) and filtering (rows holding the
#: typed text) in the page itself: nothing is loaded.
SCRIPT = """
document.querySelectorAll("table").forEach(function (table) {
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, column) {
    th.dataset.sort = "";
    th.title = "sort by this column";
    th.addEventListener("click", function () {
      var up = th.dataset.sort !== "asc";
      Array.prototype.forEach.call(heads, function (h) { h.dataset.sort = ""; });
      th.dataset.sort = up ? "asc" : "desc";
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[column].textContent, y = b.cells[column].textContent;
        var numbers = x !== "" && y !== "" && !isNaN(x) && !isNaN(y);
        var order = numbers ? x - y : x.localeCompare(y);
        return up ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
var filter = document.getElementById("filter");
filter.addEventListener("input", function () {
  var text = filter.value.toLowerCase();
  document.querySelectorAll("tbody tr").forEach(function (row) {
    row.hidden = text !== "" && row.textContent.toLowerCase().indexOf(text) < 0;
  });
  if (text) document.querySelectorAll("details").forEach(function (d) { d.open = true; });
});
"""


def bar_chart_svg(title: str, counts: list[tuple[str, int]], color: str) -> str:
    """A horizontal bar chart as inline SVG."""
    width, bar, gap, label = 420, 18, 6, 110
    top = max([count for _, count in counts] + [1])
    height = len(counts) * (bar + gap) + gap
    parts = [
        f"<figure><figcaption>{html.escape(title)}</figcaption>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html.escape(title)}">'
    ]
    for index, (name, count) in enumerate(counts):
        y = gap + index * (bar + gap)
        length = round((width - label - 50) * count / top)
        parts.append(
            f'<text x="{label - 6}" y="{y + bar - 5}" text-anchor="end" font-size="12">'
            f"{html.escape(name)}</text>"
            f'<rect x="{label}" y="{y}" width="{max(length, 1)}" height="{bar}" '
            f'fill="{color}" rx="3"/>'
            f'<text x="{label + length + 5}" y="{y + bar - 5}" font-size="12">{count}</text>'
        )
    parts.append("</svg></figure>")
    return "".join(parts)


@dataclass(frozen=True)
class Markup:
    """A table cell already written as HTML (its text escaped by whoever wrote it)."""

    html: str


def _cell(value: Any) -> str:
    if isinstance(value, Markup):
        return value.html
    return html.escape("" if value is None else str(value))


def html_table(headers: list[str], body: list[list[Any]], url_columns: set[int]) -> str:
    """A table of ``body``'s first :data:`MAX_LISTED` rows (a note counting the rest),
    ``url_columns`` styled as URLs (they may break anywhere)."""
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    lines = [f"<table><thead><tr>{cells}</tr></thead><tbody>"]
    for values in body[:MAX_LISTED]:
        tds = "".join(
            f'<td class="url">{_cell(v)}</td>' if i in url_columns else f"<td>{_cell(v)}</td>"
            for i, v in enumerate(values)
        )
        lines.append(f"<tr>{tds}</tr>")
    lines.append("</tbody></table>")
    if len(body) > MAX_LISTED:
        lines.append(f'<p class="more">{len(body) - MAX_LISTED} more in the csv/jsonl export.</p>')
    return "".join(lines)


def _row_count(count: int) -> str:
    """``1 row``, ``2 rows``."""
    return f"{count} row" if count == 1 else f"{count} rows"


def category_section(
    ident: str, title: str, text: str, count: int, table: str, listed: int | None = None
) -> str:
    """A category: its title and count (of export rows), and its table, folded; ``listed``:
    the table's rows, when fewer than ``count`` (a spiral's sources are one row)."""
    folded = _row_count(count)
    if listed is not None and listed != count:
        folded = f"{_row_count(listed)} for {count} sources (each spiral is one row)"
    return (
        f'<section id="{ident}"><h2>{html.escape(title)} '
        f'(<span class="count" data-category="{ident}">{count}</span>)</h2>'
        f'<p class="lede">{html.escape(text)}</p>'
        + (f"<details><summary>{folded}</summary>{table}</details>" if count else "")
        + "</section>"
    )


def page_head(title: str, dated: str = "") -> str:
    """A report page up to its heading (the inline style included) and ``dated`` under it."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        + (f'<p class="lede">{html.escape(dated)}</p>' if dated else "")
    )


def _source_rows(members: list[Row], arrived_from: Mapping[str, str]) -> list[list[Any]]:
    """A category's table rows: one per source, one per spiral (:func:`spirals`) naming
    its pattern, its length and why it has no target, its sources listed, folded."""
    grouped = {id(row): group for group in spirals(members) for row in group}
    body = []
    for row in members:
        group = grouped.get(id(row))
        if group is not None and row is not group[0]:
            continue
        source: Any = row["source"]
        target = row["target"] or why_no_target(row)
        if group is not None:
            sources = "\n".join(html.escape(member["source"]) for member in group)
            source = Markup(
                f"{html.escape(url_pattern(row['urls']))}<details><summary>spiral: "
                f"{len(group)} sources</summary>{sources}</details>"
            )
            target = why_spiral(group)
        body.append(
            [source, linked_from(row, arrived_from), target, row["status"], hop_list(row),
             row["outcome"], row["final_status"], row["flag"]]
        )  # fmt: skip
    return body


def write_report(
    rows: list[SourceRow],
    hints: Iterable[Row],
    judge: Callable[[Row], str | None],
    out: TextIO,
    site: str = "",
    dated: str = "",
) -> dict[str, int]:
    """Write the report page (``judge``: :func:`canonical_judge`; ``site`` and ``dated`` for
    its header); return each category's count."""
    data = [{**row.as_dict(), "urls": row.urls} for row in rows]
    arrived_from = arrivals(data)
    counts: dict[str, int] = {}
    sections = []
    headers = ["source", "linked from", "target (or why none)", "status"]
    headers += ["hops (status \u2192 URL)", "outcome", "final", "flag"]
    for ident, title, text, member in CATEGORIES:
        members = [row for row in data if member(row)]
        counts[ident] = len(members)
        body = _source_rows(members, arrived_from)
        table = html_table(headers, body, {0, 1, 2, 4})
        sections.append(category_section(ident, title, text, len(members), table, len(body)))
    groups = variant_groups(data)
    counts["variants"] = len(groups)
    body = [
        [group[0]["source_key"], len(group), "\n".join(r["source"] for r in group)]
        for group in groups
    ]
    sections.append(
        category_section(
            "variants",
            "Sources that are variants of one page",
            "Several source URLs with one dedupe key (parameter order, tracking parameters, "
            "scheme or host spelling): one map entry serves them all.",
            len(groups),
            html_table(["dedupe key", "sources", "source URLs"], body, {0, 2}),
        )
    )
    problems = canonical_problems(hints, judge)
    counts["canonical"] = len(problems)
    body = [
        [hint["page_url"], hint["canonical_url"], problem, use_instead(hint, problem, rows)]
        for hint, problem in problems
    ]
    sections.append(
        category_section(
            "canonical",
            "Canonical hints pointing at a redirect or a non-200 URL",
            "The page names as canonical a URL that redirects or does not answer 200: "
            "point it at the final URL.",
            len(problems),
            html_table(["page", "canonical", "problem", "use instead"], body, {0, 1, 3}),
        )
    )
    entries = sum(1 for row in rows if row.entry)
    lengths = Counter(row.hops for row in rows if row.outcome == FETCHED)
    length_bars = [(f"{n} hop{'s' * (n > 1)}", lengths[n]) for n in sorted(lengths)]
    length_bars.append(("dead end", sum(1 for row in rows if row.outcome != FETCHED)))
    mix = Counter(status for row in rows for status in row.hop_statuses[:1])
    mix_bars = [
        (str(status) if status != 200 else "refresh", mix[status]) for status in sorted(mix)
    ]
    cards = [("ok", "entries", "map entries", entries)]
    titled = [(ident, title) for ident, title, *_ in CATEGORIES]
    titled += [("variants", "Variant groups"), ("canonical", "Canonicals to fix")]
    cards += [("bad" if counts[i] else "none", i, title, counts[i]) for i, title in titled]
    summary = "".join(
        f'<a class="card {kind}" href="#{ident}"><span class="count">{count}</span>'
        f"{html.escape(title)}</a>"
        for kind, ident, title, count in cards
    )
    title = f"Redirect audit: {site}" if site else "Redirect audit"
    out.write(
        page_head(title, dated)
        + f'<p class="lede">{len(rows)} redirect sources; {entries} are map entries '
        "(see <code>scrapy redirects --format nginx|apache|bulk</code>).</p>"
        f'<div class="summary">{summary}</div>'
        '<p><input id="filter" type="search" placeholder="Filter the rows: any URL, status or '
        'reason" aria-label="Filter the rows"></p>'
        '<div class="charts">'
        f"{bar_chart_svg('Chain length (hops from each source)', length_bars, '#3b6fd8')}"
        f"{bar_chart_svg('Status mix (every redirect hop)', mix_bars, '#d8893b')}"
        "</div>" + "".join(sections) + f"<script>{SCRIPT}</script></body></html>\n"
    )
    return counts
