"""A generated site for multi-worker crawl tests: hundreds of interlinked pages, some broken
links (404) and some redirects, served by :class:`tests.httpserver.TestServer`.

Every page is reachable from ``/p/0`` (page ``i`` links to ``i + 1``), and links also jump
around the graph so that workers find pages in no particular order. The server records
every request it answers, which is what crawl tests assert on.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.httpserver import Page, TestServer, html, redirect

#: Every how many pages one links to a missing page (404) and one to a redirect.
MISSING_EVERY, MOVED_EVERY, TRACKED_EVERY = 10, 15, 20


@dataclass(frozen=True)
class LinkGraph:
    """The site's shape: ``pages`` pages ``/p/<i>``, plus ``/missing/<i>`` (404) and
    ``/moved/<i>`` (301 to another page) linked from some of them."""

    pages: int

    def links(self, i: int) -> list[str]:
        n = self.pages
        links = [f"/p/{(i + 1) % n}", f"/p/{(2 * i + 1) % n}", f"/p/{(7 * i + 3) % n}"]
        if i % MISSING_EVERY == 0:
            links.append(f"/missing/{i}")
        if i % MOVED_EVERY == 0:
            links.append(f"/moved/{i}")
        if i % TRACKED_EVERY == 0:  # same dedupe key as a plain link: never fetched twice
            links.append(f"/p/{(i + 5) % n}?utm_source=feed")
        return links

    def moved_target(self, i: int) -> str:
        return f"/p/{(3 * i + 2) % self.pages}"

    def page(self, path: str) -> Page | None:
        kind, _, number = path.partition("?")[0].strip("/").partition("/")
        if not number.isdigit() or int(number) >= self.pages:
            return None
        i = int(number)
        if kind == "p":
            return html(*self.links(i), title=f"page {i}")
        if kind == "moved" and i % MOVED_EVERY == 0:
            return redirect(self.moved_target(i))
        return None  # /missing/<i>: 404

    def expected_paths(self) -> set[str]:
        """Every path a complete crawl from ``/p/0`` requests (robots.txt aside; a page may
        be fetched under a tracked spelling, ``/p/5?utm_source=feed``, instead)."""
        paths = {f"/p/{i}" for i in range(self.pages)}
        paths |= {f"/missing/{i}" for i in range(0, self.pages, MISSING_EVERY)}
        paths |= {f"/moved/{i}" for i in range(0, self.pages, MOVED_EVERY)}
        return paths


def serve(graph: LinkGraph, delay: float = 0.0) -> TestServer:
    """A :class:`TestServer` for ``graph`` (use it as a context manager); every answer
    takes ``delay`` seconds."""
    return TestServer({"/*": graph.page}, delay=delay)
