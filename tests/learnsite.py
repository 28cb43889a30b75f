"""A local site whose links carry parameters no built-in list knows, for content learning.

Pages under ``/articles/N`` and ``/products/N``; links to them carry ``from=nav``,
``src=footer`` and ``view=print``, which change nothing anywhere, and ``lang=de``, which
translates a product page but is ignored on articles. Every answer carries per-request
noise (a random CSRF token and the time of day), so only a normalized comparison sees
equal content. ``/missing/N`` answers 200 with one "not found" page for every N (a
soft-404); ``/gone/N`` answers 404. ``matters_below``: ``from`` changes the content of
articles numbered below it (crawled last, depth-first from the index: a parameter that looks
neutral at first).
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit

from tests.httpserver import Page, TestServer

NEUTRAL = ("from=nav", "src=footer", "view=print")


class LearnSite:
    """The site's pages; ``routes`` for :class:`TestServer`."""

    def __init__(self, pages: int = 12, matters_below: int = 0) -> None:
        self.pages = pages
        self.matters_below = matters_below

    def links(self, section: str, i: int) -> list[str]:
        n = self.pages
        nxt, prev, far = (i + 1) % n, (i - 1) % n, (i + 5) % n
        other = "products" if section == "articles" else "articles"
        return [
            f"/{section}/{nxt}?from=nav",
            f"/{section}/{prev}?src=footer",
            f"/{section}/{i}?view=print",
            f"/{section}/{far}?lang=de",
            f"/{section}/{far}",
            f"/{other}/{i}?from=nav",
            f"/missing/{i}?from=nav",
            f"/missing/{i}",
            f"/gone/{i}?src=footer",
        ]

    def index(self) -> Page:
        plain = [f"/{s}/{i}" for s in ("articles", "products") for i in range(self.pages)]
        return _page("Index", "All pages of the site.", plain)

    def page(self, path: str) -> Page | None:
        parts = urlsplit(path)
        params = dict(parse_qsl(parts.query))
        if parts.path == "/":
            return self.index()
        _, section, number = parts.path.split("/") if parts.path.count("/") == 2 else ("", "", "")
        if section == "missing" and number.isdigit():
            return _page("Page not found", "Sorry, this page does not exist.", ["/"])
        if section not in ("articles", "products") or not number.isdigit():
            return None
        i = int(number)
        if i >= self.pages:
            return None
        text = f"{section.title()} {i}: " + " ".join(
            f"sentence {j} about {section} number {i}." for j in range(20)
        )
        if section == "products" and params.get("lang") == "de":
            text = f"Produkt {i}: " + " ".join(f"Satz {j} über Produkt {i}." for j in range(20))
        if section == "articles" and i < self.matters_below and "from" in params:
            text += f" Arrived from {params['from']}."
        return _page(f"{section.title()} {i}", text, self.links(section, i))

    def server(self) -> TestServer:
        return TestServer({"/*": self.page})

    def documents(self, paths: Iterable[str]) -> Counter[str]:
        """Successful fetches per document (a path, plus ``lang`` on products)."""
        found: Counter[str] = Counter()
        for path in paths:
            parts = urlsplit(path)
            if not parts.path.startswith(("/articles/", "/products/")) and parts.path != "/":
                continue
            lang = dict(parse_qsl(parts.query)).get("lang")
            if parts.path.startswith("/products/") and lang:
                found[f"{parts.path}?lang={lang}"] += 1
            else:
                found[parts.path] += 1
        return found


def _page(title: str, text: str, links: list[str]) -> Page:
    anchors = "\n".join(f'<li><a href="{link}">{link}</a></li>' for link in links)
    return Page(
        f"<html><head><title>{title}</title>"
        f'<meta name="csrf-token" content="{secrets.token_urlsafe(16)}"></head>'
        f"<body><h1>{title}</h1><p>{text}</p><ul>{anchors}</ul>"
        f"<footer>Rendered at {time.strftime('%H:%M:%S')}</footer></body></html>"
    )


def duplicate_ratio(documents: Counter[str]) -> float:
    """Fetches per document (1.0: each fetched once)."""
    return sum(documents.values()) / max(1, len(documents))
