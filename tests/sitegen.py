"""A generated site for multi-worker crawl tests: hundreds of interlinked pages, some broken
links (404) and some redirects, served by :class:`tests.httpserver.TestServer`.

Every page is reachable from ``/p/0`` (page ``i`` links to ``i + 1``), and links also jump
around the graph so that workers find pages in no particular order. The server records
every request it answers, which is what crawl tests assert on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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


@dataclass(frozen=True)
class HostsGraph:
    """A site spread over ``hosts`` hosts (loopback addresses 127.0.0.2, 127.0.0.3, ...,
    one server each) of ``pages`` pages ``/p/<i>`` each, every one reachable from the first
    host's ``/p/0``: page ``i`` of host ``h`` links to the next page of its host and to pages
    of other hosts, so the crawl discovers every host early and keeps all of them busy."""

    hosts: int
    pages: int
    #: Links from each page to other hosts' pages.
    fanout: int = 6

    def addresses(self) -> list[str]:
        return [f"127.0.0.{host + 2}" for host in range(self.hosts)]

    def links(self, host: int, i: int) -> list[tuple[int, int]]:
        """(host, page) pairs page ``i`` of ``host`` links to."""
        links = [(host, (i + 1) % self.pages)]
        for step in range(1, self.fanout + 1):
            links.append(((host * 7 + step * 11 + i) % self.hosts, (i * 3 + step) % self.pages))
        return links

    def route(self, host: int, bases: list[str]) -> Callable[[str], Page | None]:
        """The pages of ``host``, linking to the servers at ``bases`` (one per host)."""

        def page(path: str) -> Page | None:
            kind, _, number = path.partition("?")[0].strip("/").partition("/")
            if kind != "p" or not number.isdigit() or int(number) >= self.pages:
                return None
            links = [f"{bases[h]}/p/{p}" for h, p in self.links(host, int(number))]
            return html(*links, title=f"host {host} page {number}")

        return page


@contextmanager
def serve_hosts(graph: HostsGraph, delay: float = 0.0) -> Iterator[list[TestServer]]:
    """One :class:`TestServer` per host of ``graph``, each on its own loopback address."""
    servers = [TestServer({}, delay=delay, host=address) for address in graph.addresses()]
    bases = [server.url for server in servers]
    with ExitStack() as stack:
        for host, server in enumerate(servers):
            server.routes["/*"] = graph.route(host, bases)
            stack.enter_context(server)
        yield servers
