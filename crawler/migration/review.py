"""The review loop: the CSV of ``scrapy migration-map --format csv``, edited by a person and
fed back with ``--reviewed FILE``, decides the final map.

Each row's ``decision`` column says what the reviewer decided about the matcher's answer:

* empty: the matcher's answer stands (an edited ``new`` without a decision is reported, not
  applied);
* ``accept``: the row, as written, goes into the map: ``old`` redirects to its ``new``. It
  was already an entry with that ``new``: the answer is unchanged; otherwise (an ambiguous or
  removed page accepted, a target the matcher no longer gives) it becomes a ``reviewed``
  entry;
* ``change``: ``old`` redirects to the ``new`` the reviewer wrote (method ``reviewed``);
* ``reject``: never an entry, whatever the matcher says.

A ``status`` the reviewer edits (301, 302, 307 or 308) is kept for an entry. Columns the
reviewer added are kept and written back into the next CSV, so a review can go round
several times. A row whose ``old`` is not an old document of the current answers is reported
and left out. Anything malformed stops the command with one line naming the file, the line
and what is wrong: nothing half-applied.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from bloom_frontier.migration.answers import MigrationAnswer

DECISIONS = ("accept", "change", "reject")
#: Statuses a reviewer may give an entry (those the server writers express).
STATUSES = (301, 302, 307, 308)
#: The columns a reviewed file must have.
REQUIRED = ("old", "new", "decision")


class ReviewError(ValueError):
    """A reviewed file that cannot be applied; the message is the line the user reads."""


@dataclass(frozen=True)
class ReviewedRow:
    """One row of a reviewed file."""

    line: int
    old: str
    new: str | None
    decision: str  # "" or one of DECISIONS
    status: int | None
    extra: dict[str, str] = field(default_factory=dict)  # the reviewer's own columns


@dataclass
class Review:
    """A reviewed file, read: its rows by old URL, and the columns the reviewer added."""

    path: str
    rows: dict[str, ReviewedRow]
    extra_columns: tuple[str, ...] = ()


@dataclass
class Applied:
    """The answers after a review, and what the user should be told about it."""

    answers: list[MigrationAnswer]
    extra: dict[str, dict[str, str]]  # by old URL: the reviewer's own columns
    decisions: dict[str, str]  # by old URL: the decision made
    notes: list[str]


def _absolute(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _delimiter(header: str) -> str:
    """The header line's delimiter: a spreadsheet saving in some locales writes ``;``."""
    counts = {delimiter: header.count(delimiter) for delimiter in ",;\t"}
    return max(counts, key=lambda delimiter: counts[delimiter])


def read_review(path: str | Path, answer_columns: Sequence[str]) -> Review:
    """The reviewed CSV at ``path`` (``answer_columns``: those the command writes from the
    answers; every other column but ``decision`` is the reviewer's own, ``note`` included).
    :class:`ReviewError` for anything malformed."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ReviewError(f"--reviewed {name}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ReviewError(
            f"--reviewed {name}: not UTF-8 text (byte {exc.start}): save the CSV as UTF-8"
        ) from None
    except OSError as exc:
        raise ReviewError(f"--reviewed {name}: cannot be read ({exc.strerror})") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise ReviewError(f"{name} line 1: no header (the CSV of --format csv starts with one)")
    reader = csv.reader(text.splitlines(keepends=True), delimiter=_delimiter(lines[0]), strict=True)
    line = 1  # where the row being read starts
    try:
        header = [column.strip() for column in next(reader)]
        missing = [column for column in REQUIRED if column not in header]
        if missing:
            raise ReviewError(
                f"{name} line 1: no {', '.join(missing)} column (the header of --format csv "
                f"names {', '.join(REQUIRED)})"
            )
        extra = tuple(
            column
            for column in header
            if column and column != "decision" and column not in answer_columns
        )
        rows: dict[str, ReviewedRow] = {}
        line = reader.line_num + 1
        for values in reader:
            if any(value.strip() for value in values):
                row = _row(name, line, header, values, extra)
                if row.old in rows:
                    raise ReviewError(
                        f"{name} line {line}: {row.old} is reviewed twice (also line "
                        f"{rows[row.old].line}): keep one row per old URL"
                    )
                rows[row.old] = row
            line = reader.line_num + 1
    except csv.Error as exc:
        raise ReviewError(f"{name} line {line}: not CSV ({exc})") from None
    return Review(name, rows, extra)


def _row(
    name: str, line: int, header: list[str], values: list[str], extra: tuple[str, ...]
) -> ReviewedRow:
    """One data row, checked."""
    if len(values) > len(header):
        raise ReviewError(
            f"{name} line {line}: {len(values)} fields, the header has {len(header)} "
            "(a comma inside a URL needs quotes)"
        )
    cells = dict(zip(header, (value.strip() for value in values), strict=False))
    old = cells.get("old", "")
    if not _absolute(old):
        raise ReviewError(f"{name} line {line}: old is not an http(s) URL: {old!r}")
    decision = cells.get("decision", "").lower()
    if decision and decision not in DECISIONS:
        raise ReviewError(
            f"{name} line {line}: decision {cells['decision']!r} is not one of "
            f"{', '.join(DECISIONS)} (or empty)"
        )
    new = cells.get("new") or None
    if new is not None and not _absolute(new):
        raise ReviewError(f"{name} line {line}: new is not an http(s) URL: {new!r}")
    if decision in ("accept", "change") and new is None:
        raise ReviewError(
            f"{name} line {line}: {decision} needs the page to redirect to in new "
            "(reject to keep it out of the map)"
        )
    status: int | None = None
    if cells.get("status"):
        try:
            status = int(cells["status"])
        except ValueError:
            status = 0
        if status not in STATUSES:
            raise ReviewError(
                f"{name} line {line}: status {cells['status']!r} is not one of "
                f"{', '.join(map(str, STATUSES))}"
            )
    return ReviewedRow(
        line, old, new, decision, status, {column: cells.get(column, "") for column in extra}
    )


def _decided(answer: MigrationAnswer, row: ReviewedRow) -> MigrationAnswer:
    """``answer`` after ``row``'s decision."""
    status = row.status or answer.status
    if row.decision == "reject":
        said = f" ({answer.reason})" if answer.reason else ""
        return dataclasses.replace(answer, entry=False, reason=f"rejected in review{said}")
    if row.decision == "accept" and answer.entry and row.new == answer.new:
        return dataclasses.replace(answer, status=status)
    if row.decision in ("accept", "change"):
        said = f"{answer.method} {answer.new or 'no page'} {answer.confidence:.2f}"
        return dataclasses.replace(
            answer,
            new=row.new,
            confidence=1.0,
            method="reviewed",
            entry=True,
            status=status,
            reason=f"{row.decision} in review (the matcher said: {said})",
        )
    return answer


def apply_review(answers: Iterable[MigrationAnswer], review: Review) -> Applied:
    """The answers with ``review``'s decisions applied, and the notes for the user: rows of
    the file that match no current answer, edits without a decision, answers the file does
    not review."""
    answers = list(answers)
    known = {answer.old for answer in answers}
    result = Applied([], {}, {}, [])
    for row in review.rows.values():
        if row.old not in known:
            result.notes.append(
                f"{review.path} line {row.line}: {row.old} is not an old document of these "
                "crawls: left out"
            )
    unreviewed = 0
    for answer in answers:
        row = review.rows.get(answer.old)
        if row is None:
            unreviewed += 1
            result.answers.append(answer)
            continue
        if not row.decision and row.new != answer.new:
            result.notes.append(
                f"{review.path} line {row.line}: new was edited ({row.new or 'emptied'}) but "
                "decision is empty: the matcher's answer stands (write change to keep it)"
            )
        result.answers.append(_decided(answer, row))
        result.extra[answer.old] = row.extra
        if row.decision:
            result.decisions[answer.old] = row.decision
    if unreviewed:
        result.notes.append(
            f"{unreviewed} old documents are not in {review.path}: the matcher's answers "
            "stand for them"
        )
    return result
