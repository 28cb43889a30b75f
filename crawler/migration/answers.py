"""What the migration matcher says about one old document: :class:`MigrationAnswer`.

One answer per old document (a page the old crawl fetched with status 200). ``entry`` says
whether the answer goes into the deployable map: only a confident, unambiguous match does;
every other answer is kept for review with its reason. The JSONL form is :meth:`as_json`:

>>> answer = MigrationAnswer(
...     old="http://old.example/a.html", new="http://new.example/a/", confidence=0.97,
...     method="near-content", entry=True, reason="main content 0.97 similar")
>>> answer.as_json()["new"], answer.as_json()["entry"]
('http://new.example/a/', True)
>>> MigrationAnswer.from_json(answer.as_json()) == answer
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

#: How an answer was reached, strongest evidence first.
METHODS = (
    "exact",  # equal content (exact fingerprint of the normalized body)
    "near-content",  # near-duplicate main content (boilerplate left out)
    "title",  # titles and headings
    "url-tokens",  # words of the URL path
    "graph",  # parents and children already matched
    "merged",  # two or more old pages merged into one new page
    "redirect",  # the old URL redirects (handled as `scrapy redirects` does)
    "ambiguous",  # two close candidates: for review, never an entry
    "removed",  # no page of the new site holds it: not an entry
    "reviewed",  # set by a person in the review CSV (`--reviewed`)
)


@dataclass(frozen=True)
class MigrationAnswer:
    """One old document and where its content is now (``new`` None: nowhere)."""

    old: str
    new: str | None
    confidence: float  # 0..1
    method: str  # one of METHODS
    entry: bool  # in the deployable map
    reason: str = ""  # why it is (not) an entry, in a sentence a reviewer reads
    runner_up: str | None = None  # the next-best candidate, if any
    runner_up_confidence: float | None = None
    suggestion: str | None = None  # for removed pages: a parent page URL, or "410"
    status: int = 301  # the redirect status an entry gets

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; one of {', '.join(METHODS)}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be within 0..1, not {self.confidence}")
        if self.entry and self.new is None:
            raise ValueError(f"an entry needs a target: {self.old}")

    def as_json(self) -> dict[str, Any]:
        """The JSONL line's object (``scrapy migration-map --format jsonl``)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MigrationAnswer:
        """An answer read back from :meth:`as_json` (unknown keys ignored)."""
        names = {field.name for field in fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in names})
