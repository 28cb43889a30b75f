"""What ``scrapy migration-map`` writes from the matcher's answers (:class:`MigrationAnswer`).

* ``jsonl``: one line per old document, :meth:`MigrationAnswer.as_json`;
* ``csv``: the same for review (:data:`REVIEW_COLUMNS`, a ``decision`` and a ``note`` column
  for the reviewer, then the reviewer's own columns of a ``--reviewed`` file), read back by
  :mod:`bloom_frontier.migration.review`;
* ``bulk``, ``nginx``, ``apache``: the entries only, through ``scrapy redirects``' writer
  (:func:`~bloom_frontier.redirectmap.servermap.write_server_map`; :func:`server_rows` makes
  each entry a one-hop :class:`SourceRow`, so sources are matched, collapsed and checked
  exactly as a redirect map's are);
* ``html``: one self-contained review page (:func:`write_review_page`), sortable and
  filterable as the redirect audit report is, with the same counts a script gets from the
  jsonl (:data:`CATEGORIES`).
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.migration.answers import METHODS, MigrationAnswer
from bloom_frontier.pipelines.records import FETCHED, write_rows
from bloom_frontier.redirectmap.report import (
    SCRIPT,
    Markup,
    bar_chart_svg,
    category_section,
    html_table,
    page_head,
)
from bloom_frontier.redirectmap.semantics import SourceRow, as_uri, without_dropped_params

FORMATS = ("jsonl", "csv", "bulk", "nginx", "apache", "html")
#: The columns written from the answers (a reviewed file's values of these are the tool's).
ANSWER_COLUMNS = tuple(MigrationAnswer.__dataclass_fields__)
#: The review CSV's columns; the reviewer fills ``decision`` (and ``note``, if they like).
REVIEW_COLUMNS = (*ANSWER_COLUMNS, "decision", "note")


#: What a spreadsheet reads as a formula at the start of a cell (OWASP's CSV injection list).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def as_text(cell: str) -> str:
    """``cell`` as a spreadsheet shows it, never runs it: a leading ``'`` before what would
    start a formula (the tool's reasons quote titles of crawled pages).

    >>> as_text("=1+1"), as_text("title matched")
    ("'=1+1", 'title matched')
    """
    return f"'{cell}" if cell.startswith(FORMULA_START) else cell


def review_rows(
    answers: Iterable[MigrationAnswer],
    decisions: Mapping[str, str] | None = None,
    extra: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterable[dict[str, Any]]:
    """The CSV's rows: each answer, with the decision and the reviewer's columns a
    ``--reviewed`` file gave it (so that the next round of review starts from them)."""
    for answer in answers:
        kept = (extra or {}).get(answer.old, {})
        yield {
            **answer.as_json(),
            "reason": as_text(answer.reason),
            "decision": (decisions or {}).get(answer.old, ""),
            **kept,
        }


def write_review_csv(
    answers: Iterable[MigrationAnswer],
    out: TextIO,
    decisions: Mapping[str, str] | None = None,
    extra: Mapping[str, Mapping[str, str]] | None = None,
    extra_columns: Sequence[str] = (),
) -> int:
    """Write the review CSV; return its rows."""
    columns = [*REVIEW_COLUMNS, *(c for c in extra_columns if c not in REVIEW_COLUMNS)]
    return write_rows(review_rows(answers, decisions, extra), "csv", columns, out)


def server_rows(
    answers: Iterable[MigrationAnswer], rules: RuleSet = DEFAULT_RULES
) -> list[SourceRow]:
    """The entries as one-hop redirect rows, targets as ``scrapy redirects`` writes them
    (without dropped parameters, an ASCII URI); the others are no rows at all."""
    rows = []
    for answer in answers:
        if not answer.entry or answer.new is None:
            continue
        target = as_uri(without_dropped_params(answer.new, rules))
        permanent = answer.status in (301, 308)
        rows.append(
            SourceRow(
                answer.old, None, target, answer.status, 1, (answer.status,), permanent,
                FETCHED, 200, None, True, None, answer.reason,
            )
        )  # fmt: skip
    return rows


#: (id, title, what it means, which answers belong to it): each a function of the jsonl's
#: fields, so the page's counts are the counts a script gets from the jsonl.
CATEGORIES: tuple[tuple[str, str, str, Callable[[MigrationAnswer], bool]], ...] = (
    (
        "ambiguous",
        "For review: two close candidates",
        "The matcher found two pages almost equally likely: not in the map until a person "
        "accepts one (decision accept or change in the CSV).",
        lambda answer: answer.method == "ambiguous",
    ),
    (
        "removed",
        "Removed pages",
        "No page of the new site holds this content: not in the map. The suggestion is a "
        "parent page to send it to, or 410 (gone).",
        lambda answer: answer.method == "removed",
    ),
    (
        "other",
        "Not in the map for another reason",
        "Too little evidence, below --min-confidence, rejected in review, or an old redirect "
        "that ends nowhere.",
        lambda answer: not answer.entry and answer.method not in ("ambiguous", "removed"),
    ),
    (
        "merged",
        "Merged pages",
        "Two or more old pages whose content is now one new page: each redirects to it.",
        lambda answer: answer.method == "merged",
    ),
    (
        "reviewed",
        "Set in review",
        "Entries a person accepted or changed in the review CSV (--reviewed).",
        lambda answer: answer.method == "reviewed",
    ),
    (
        "entries",
        "Map entries, least confident first",
        "Every redirect the map holds (what --format nginx, apache and bulk write).",
        lambda answer: answer.entry,
    ),
)
HEADERS = [
    "old", "new (or why none)", "method", "confidence", "runner-up", "runner-up confidence",
    "reason", "suggestion", "decision",
]  # fmt: skip
#: Confidence bands of the entries' chart, lowest first.
BANDS = ((0.0, "< 0.5"), (0.5, "0.5-0.8"), (0.8, "0.8-0.9"), (0.9, "0.9-0.95"), (0.95, ">= 0.95"))


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _body(members: list[MigrationAnswer], decisions: Mapping[str, str]) -> list[list[Any]]:
    ordered = sorted(members, key=lambda answer: (answer.confidence, answer.old))
    return [
        [
            answer.old,
            answer.new or Markup("<em>no page</em>"),
            answer.method,
            _number(answer.confidence),
            answer.runner_up,
            _number(answer.runner_up_confidence),
            answer.reason,
            answer.suggestion,
            decisions.get(answer.old, ""),
        ]
        for answer in ordered
    ]


def _band(confidence: float) -> str:
    return [label for floor, label in BANDS if confidence >= floor][-1]


def write_review_page(
    answers: Sequence[MigrationAnswer],
    out: TextIO,
    site: str = "",
    dated: str = "",
    decisions: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Write the review page; return each category's count."""
    decisions = decisions or {}
    counts: dict[str, int] = {}
    sections = []
    for ident, title, text, member in CATEGORIES:
        members = [answer for answer in answers if member(answer)]
        counts[ident] = len(members)
        table = html_table(HEADERS, _body(members, decisions), {0, 1, 4, 7})
        sections.append(category_section(ident, title, text, len(members), table))
    methods = Counter(answer.method for answer in answers)
    method_bars = [(method, methods[method]) for method in METHODS if methods[method]]
    bands = Counter(_band(answer.confidence) for answer in answers if answer.entry)
    band_bars = [(label, bands[label]) for _, label in BANDS]
    kinds = {"ambiguous": "bad", "removed": "bad", "other": "bad", "entries": "ok"}
    summary = "".join(
        f'<a class="card {kinds.get(ident, "none") if counts[ident] else "none"}" '
        f'href="#{ident}"><span class="count">{counts[ident]}</span>{html.escape(title)}</a>'
        for ident, title, *_ in CATEGORIES
    )
    title = f"Migration review: {site}" if site else "Migration review"
    out.write(
        page_head(title, dated)
        + f'<p class="lede">{len(answers)} old documents; {counts["entries"]} are map entries '
        "(<code>scrapy migration-map --format nginx|apache|bulk</code>). Review with "
        "<code>--format csv</code>: fill its decision column and feed it back with "
        "<code>--reviewed FILE</code>.</p>"
        f'<div class="summary">{summary}</div>'
        '<p><input id="filter" type="search" placeholder="Filter the rows: any URL, method or '
        'reason" aria-label="Filter the rows"></p>'
        '<div class="charts">'
        f"{bar_chart_svg('How each old document was matched', method_bars, '#3b6fd8')}"
        f"{bar_chart_svg('Confidence of the entries', band_bars, '#1b7f3b')}"
        "</div>" + "".join(sections) + f"<script>{SCRIPT}</script></body></html>\n"
    )
    return counts
