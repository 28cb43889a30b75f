"""Local sites built to fool parameter-rule learning, one case per site (issue 19).

Each :class:`Case` serves an index linking every page of one pattern, and pages whose links
carry a parameter that changes nothing on some pages of the pattern and something on others.
It knows which **document** each URL shows (the path, plus the parameters that change the
content there), so a test can tell a false merge from a saving: a document linked but never
fetched was merged into another one.

* ``sort``: ``/cat/1..40?sort=price|name``; categories 21-40 list one product (sort changes
  nothing), 1-20 list three and sort reorders them (the issue's case);
* ``view``: ``/page/1..30?view=list|grid``; ``view=list`` re-renders the gallery template
  (pages 1-10) as a table, the text template (11-30) ignores it;
* ``lang``: ``/doc/1..30?lang=de``; docs 1-6 have a translation, the others ignore it;
* ``late``: ``/news/1..40?ref=mail``; ``ref`` adds a line on news 1-8 only, which a
  depth-first crawl from the index reaches last (neutral until then);
* ``small``: ``/item/1..30?promo=1``; on every fourth item the promo changes one price line
  of a long page, nothing elsewhere;
* ``noise``: ``/live/1..20?from=nav|sort=name``; every answer carries a visit counter and a
  rotating ad (content that changes between two fetches of one URL), ``from`` changes
  nothing, ``sort`` reorders the three entries;
* ``neutral``: ``/shop/1..150`` and ``/blog/1..150`` with ``from=nav`` and ``src=footer``,
  which change nothing anywhere: learning them is the saving to keep.

Pages link their own variants only, and the index lists pages in number order, so a
depth-first crawl fetches the highest numbers, where the parameter is neutral, first.
Every answer carries per-request noise the fingerprints mask (a CSRF token, the time of day).
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from tests.httpserver import Page, TestServer

_visits = itertools.count(1000)
ADS = ("Buy shoes today", "Cheap flights to Lisbon", "A new phone plan")


def _html(title: str, body: str, nav: Iterable[str]) -> Page:
    items = "".join(f'<li><a href="{link}">{link}</a></li>' for link in nav)
    return Page(
        f"<html><head><title>{title}</title>"
        f'<meta name="csrf-token" content="{secrets.token_urlsafe(16)}"></head>'
        f'<body><header><ul class="nav">{items}</ul></header><h1>{title}</h1>{body}'
        f"<footer>Rendered at {time.strftime('%H:%M:%S')}</footer></body></html>"
    )


def _prose(topic: str, n: int = 12) -> str:
    return "".join(f"<p>Paragraph {j} of {topic}, with words of its own.</p>" for j in range(n))


@dataclass(frozen=True)
class Case:
    """One adversarial site: ``pattern`` (``/cat/``) pages numbered 1..``count``; ``page``
    renders a path and its parameters; ``links`` are the links of page ``n``;
    ``document`` names the content a URL shows."""

    name: str
    pattern: str
    count: int
    page: Callable[[int, dict[str, str]], str]
    links: Callable[[int], list[str]]
    document: Callable[[int, dict[str, str]], str]
    patterns: tuple[str, ...] = ()

    def all_patterns(self) -> tuple[str, ...]:
        return (self.pattern, *self.patterns)

    def index(self) -> Page:
        plain = [f"{p}{n}" for p in self.all_patterns() for n in range(1, self.count + 1)]
        return _html("Index", "<p>Every page of the site.</p>", plain)

    def links_of(self, pattern: str, n: int) -> list[str]:
        """The links of page ``n`` of ``pattern`` (a link ``?q`` is to the page itself)."""
        return [f"{pattern}{n}{link}" if link.startswith("?") else link for link in self.links(n)]

    def serve(self, path: str) -> Page | None:
        parts = urlsplit(path)
        if parts.path == "/":
            return self.index()
        for pattern in self.all_patterns():
            number = parts.path.removeprefix(pattern)
            if parts.path.startswith(pattern) and number.isdigit():
                n = int(number)
                if 1 <= n <= self.count:
                    params = dict(parse_qsl(parts.query))
                    title = f"{pattern.strip('/').title()} {n}"
                    links = [f"{pattern}{n}", *self.links_of(pattern, n)]
                    return _html(title, self.page(n, {**params, "_": pattern}), links)
        return None

    def server(self) -> TestServer:
        return TestServer({"/*": self.serve})

    def document_of(self, path: str) -> str | None:
        """The document ``path`` shows (None: not a page of the case)."""
        parts = urlsplit(path)
        if parts.path == "/":
            return "/"
        for pattern in self.all_patterns():
            number = parts.path.removeprefix(pattern)
            if parts.path.startswith(pattern) and number.isdigit():
                params = {**dict(parse_qsl(parts.query)), "_": pattern}
                return f"{parts.path}#{self.document(int(number), params)}"
        return None

    def linked_documents(self) -> set[str]:
        """Every document the site links to (reachable from the index)."""
        found = {"/"}
        for pattern in self.all_patterns():
            for n in range(1, self.count + 1):
                for link in [f"{pattern}{n}", *self.links_of(pattern, n)]:
                    found.add(self.document_of(link) or "")
        found.discard("")
        return found

    def fetched_documents(self, paths: Iterable[str]) -> Counter[str]:
        """Successful fetches per document."""
        found: Counter[str] = Counter()
        for path in paths:
            document = self.document_of(path)
            if document is not None:
                found[document] += 1
        return found


def _products(n: int) -> list[tuple[str, float]]:
    names = [f"Zeta {n}", f"Alpha {n}", f"Mid {n}"]
    prices = [1.0 + n, 3.0 + n, 2.0 + n]
    return list(zip(names, prices, strict=True))[: 3 if n <= 20 else 1]


def _sorted(items: list[tuple[str, float]], how: str | None) -> list[tuple[str, float]]:
    if how == "name":
        return sorted(items)
    if how == "price":
        return sorted(items, key=lambda item: item[1])
    return items


def _category(n: int, params: dict[str, str]) -> str:
    rows = "".join(
        f"<li>{name}: {price:.2f} EUR, a fine product.</li>"
        for name, price in _sorted(_products(n), params.get("sort"))
    )
    return f'<p>Category {n} of the shop.</p><ul class="products">{rows}</ul>'


SORT = Case(
    "sort",
    "/cat/",
    40,
    _category,
    lambda n: ["?sort=price", "?sort=name"],
    lambda n, p: p.get("sort", "") if n <= 20 and p.get("sort") in ("price", "name") else "",
)


def _template(n: int, params: dict[str, str]) -> str:
    if n <= 10:  # gallery: view=list shows a table with captions
        if params.get("view") == "list":
            rows = "".join(f"<tr><td>Photo {j} of page {n}, a caption.</td></tr>" for j in range(4))
            return f"<table>{rows}</table>"
        return "".join(f'<figure><img src="/img/{n}/{j}.png" alt=""></figure>' for j in range(4))
    return _prose(f"text page {n}")


VIEW = Case(
    "view",
    "/page/",
    30,
    _template,
    lambda n: ["?view=list", "?view=grid"],
    lambda n, p: "list" if n <= 10 and p.get("view") == "list" else "",
)


def _doc(n: int, params: dict[str, str]) -> str:
    if n <= 6 and params.get("lang") == "de":
        return "".join(
            f"<p>Absatz {j} von Dokument {n}, mit eigenen Worten.</p>" for j in range(12)
        )
    return _prose(f"document {n}")


LANG = Case(
    "lang",
    "/doc/",
    30,
    _doc,
    lambda n: ["?lang=de"],
    lambda n, p: "de" if n <= 6 and p.get("lang") == "de" else "",
)


def _news(n: int, params: dict[str, str]) -> str:
    text = _prose(f"news {n}")
    if n <= 8 and "ref" in params:
        text += f"<p>Shared with you by {params['ref']}.</p>"
    return text


LATE = Case(
    "late",
    "/news/",
    40,
    _news,
    lambda n: ["?ref=mail"],
    lambda n, p: f"ref={p['ref']}" if n <= 8 and "ref" in p else "",
)


def _item(n: int, params: dict[str, str]) -> str:
    price = 12.0 + n
    if n % 4 == 0 and params.get("promo") == "1":
        price *= 0.9
    return _prose(f"item {n}", 20) + f"<p>Price: {price:.2f} EUR</p>"


SMALL = Case(
    "small",
    "/item/",
    30,
    _item,
    lambda n: ["?promo=1"],
    lambda n, p: "promo" if n % 4 == 0 and p.get("promo") == "1" else "",
)


def _live(n: int, params: dict[str, str]) -> str:
    entries = [f"Entry {w} {n}" for w in ("zulu", "alpha", "mike")]
    if params.get("sort") == "name":
        entries.sort()
    rows = "".join(f"<li>{entry}, posted here.</li>" for entry in entries)
    return (
        f"<p>Visits: {next(_visits)}</p><aside>{secrets.choice(ADS)}</aside>"
        f"{_prose(f'live page {n}', 4)}<ul>{rows}</ul>"
    )


NOISE = Case(
    "noise",
    "/live/",
    20,
    _live,
    lambda n: ["?from=nav", "?sort=name", f"/live/{n % 20 + 1}?from=nav"],
    lambda n, p: "name" if p.get("sort") == "name" else "",
)


def _neutral(n: int, params: dict[str, str]) -> str:
    return _prose(f"{params['_'].strip('/')} page {n}")


NEUTRAL = Case(
    "neutral",
    "/shop/",
    150,
    _neutral,
    lambda n: [
        "?from=nav",
        "?src=footer",
        f"/blog/{n}?from=nav",
        f"/shop/{n % 150 + 1}?src=footer",
    ],
    lambda n, p: "",
    patterns=("/blog/",),
)

#: The cases that must merge nothing meaningful, by name.
FOOLING = {case.name: case for case in (SORT, VIEW, LANG, LATE, SMALL, NOISE)}
