"""Which query parameters change nothing, proven by content (pure: no I/O).

Two fetched URLs **differ by a parameter** ``p`` when their keys are equal once ``p`` (name
and value) is removed: ``/a?id=1&from=nav`` and ``/a?id=1``, or ``/a?from=nav`` and
``/a?from=footer``. :class:`ParamEvidence` is fed every fetched page (URL, key, content
fingerprint and kind) and compares each one with a page of each family it joins:

* both pages ``ok`` (status 2xx, visible text, not a soft-404) with equal exact fingerprints:
  **evidence** that ``p`` changes nothing there;
* both ``ok`` with different fingerprints, or one ``ok`` and the other a 4xx answer: a
  **counter-example**, final: the parameter is never proposed where it was seen (a 5xx is
  treated as transient, an error, empty page or soft-404 proves nothing either way).

Evidence counts only while its content is unique to one document: a fingerprint also seen on
another path, or in another family of the same parameter (another value of another
parameter), is a generic page (an error template, "no results", a login wall) and proves
nothing. A drop rule for
``p`` is proposed for a host when ``min_pairs`` families (so as many distinct documents) give
evidence from at least two sections of the site (top-level directories, or pages at the
root) and the host has no counter-example; otherwise for each path prefix (``/docs/``) that
has ``min_pairs`` and none, the shallowest first. A rule reaches no further than its
evidence: pairs seen only under ``/articles/`` say nothing about ``/products/``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from crawler.content.fingerprint import OK


@dataclass(frozen=True)
class Page:
    """A fetched page as learning sees it: its final URL and key, content and status."""

    url: str
    key: str
    exact: str
    kind: str
    status: int


@dataclass(frozen=True)
class CounterExample:
    """Two pages that differ by ``param`` alone and say different things."""

    host: str
    param: str
    path: str
    url_a: str
    url_b: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"url_a": self.url_a, "url_b": self.url_b, "reason": self.reason}


@dataclass(frozen=True)
class Proposal:
    """Drop ``param`` in ``scope`` (``host`` or ``host/prefix/*``), with the URL pairs
    that prove it."""

    scope: str
    param: str
    evidence: tuple[tuple[str, str], ...]


@dataclass
class _Tally:
    """Per host and parameter: evidence by family (the key without the parameter) as
    (url, url, fingerprint, path), and counter-examples."""

    evidence: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)
    counters: list[CounterExample] = field(default_factory=list)
    families_by_content: defaultdict[str, set[str]] = field(
        default_factory=lambda: defaultdict(set)
    )


def split_key(key: str) -> tuple[str, str, str] | None:
    """(host without port, path, query) of a key's URL; None for identity keys.

    >>> split_key("r2|https://e.org:8080/a/b?x=1")
    ('e.org', '/a/b', 'x=1')
    """
    body = key.partition("|")[2]
    _, sep, rest = body.partition("://")
    if not sep:
        return None
    head, _, query = rest.partition("?")
    authority, slash, path = head.partition("/")
    hostport = authority.rpartition("@")[2]
    host = hostport if hostport.endswith("]") else hostport.rpartition(":")[0] or hostport
    return host, slash + path, query


def without_param(key: str, name: str) -> str:
    """``key`` without every ``name=`` parameter (``name`` lower-case, matched as the rules
    match names: case-insensitively).

    >>> without_param("r2|https://e.org/a?x=1&From=nav&y=2", "from")
    'r2|https://e.org/a?x=1&y=2'
    """
    head, sep, query = key.partition("?")
    if not sep:
        return key
    kept = [p for p in query.split("&") if p.partition("=")[0].lower() != name]
    return f"{head}?{'&'.join(kept)}" if kept else head


def path_prefixes(path: str) -> list[str]:
    """The directories above ``path``, shallowest first, the root excluded.

    >>> path_prefixes("/docs/api/x.html")
    ['/docs/', '/docs/api/']
    """
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[: i + 1]) + "/" for i in range(len(parts))]


class ParamEvidence:
    """Evidence and counter-examples for dropping parameters, from the pages fed to
    :meth:`observe` (see the module docstring)."""

    def __init__(self, min_pairs: int = 3) -> None:
        self.min_pairs = max(1, min_pairs)
        self._pages: dict[str, Page] = {}  # key -> first page fetched with it
        self._families: dict[tuple[str, str], Page] = {}  # (name, key without it) -> a page
        self._names_by_base: defaultdict[str, set[str]] = defaultdict(set)
        self._paths_by_content: defaultdict[str, set[str]] = defaultdict(set)
        self._tallies: defaultdict[tuple[str, str], _Tally] = defaultdict(_Tally)

    def observe(self, page: Page) -> tuple[set[tuple[str, str]], list[CounterExample]]:
        """Record ``page``; return the (host, parameter) whose evidence changed and the new
        counter-examples."""
        if split_key(page.key) is None or page.key in self._pages:
            return set(), []
        self._pages[page.key] = page
        paths = self._paths_by_content[page.exact]
        if len(paths) < 2:  # one path or more: all that matters
            paths.add(split_key(page.key)[1])  # type: ignore[index]
        touched: set[tuple[str, str]] = set()
        counters: list[CounterExample] = []
        query = page.key.partition("?")[2]
        names = {p.partition("=")[0].lower() for p in query.split("&")} if query else set()
        for name in sorted(names):
            base = without_param(page.key, name)
            other = self._pages.get(base) or self._families.get((name, base))
            self._families.setdefault((name, base), page)
            self._names_by_base[base].add(name)
            if other is not None:
                self._compare(name, base, other, page, touched, counters)
        for name in sorted(self._names_by_base.get(page.key, ())):
            member = self._families.get((name, page.key))
            if member is not None:
                self._compare(name, page.key, member, page, touched, counters)
        return touched, counters

    def _compare(
        self,
        name: str,
        base: str,
        a: Page,
        b: Page,
        touched: set[tuple[str, str]],
        counters: list[CounterExample],
    ) -> None:
        parts = split_key(base)
        assert parts is not None
        host, path, _ = parts
        tally = self._tallies[host, name]
        if a.kind == OK and b.kind == OK:
            if a.exact == b.exact:
                tally.evidence.setdefault(base, (a.url, b.url, a.exact, path))
                tally.families_by_content[a.exact].add(base)
                touched.add((host, name))
                return
            reason = "content differs"
        elif {a.kind, b.kind} & {OK} and _client_error(a.status if a.kind != OK else b.status):
            reason = "status differs"
        else:
            return
        counter = CounterExample(host, name, path, a.url, b.url, reason)
        tally.counters.append(counter)
        counters.append(counter)
        touched.add((host, name))

    def _proves(self, tally: _Tally, exact: str) -> bool:
        """True if the content belongs to one document (not a generic page)."""
        return (
            len(self._paths_by_content[exact]) == 1 and len(tally.families_by_content[exact]) == 1
        )

    def page(self, key: str) -> Page | None:
        """The first page fetched with ``key``."""
        return self._pages.get(key)

    def add_counter(self, counter: CounterExample) -> None:
        """A counter-example found elsewhere (a re-check): no scope covering it is proposed."""
        self._tallies[counter.host, counter.param].counters.append(counter)

    def proposals(self, host: str, name: str) -> list[Proposal]:
        """The scopes where dropping ``name`` on ``host`` is proven now (possibly none)."""
        tally = self._tallies.get((host, name))
        if tally is None:
            return []
        valid = [
            (path, (url_a, url_b))
            for base, (url_a, url_b, exact, path) in sorted(tally.evidence.items())
            if self._proves(tally, exact)
        ]
        bad_paths = [counter.path for counter in tally.counters]
        sections = {(path_prefixes(path) or [path])[0] for path, _ in valid}
        if not bad_paths and len(valid) >= self.min_pairs and len(sections) >= 2:
            return [Proposal(host, name, tuple(pair for _, pair in valid))]
        prefixes = sorted(
            {prefix for path, _ in valid for prefix in path_prefixes(path)},
            key=lambda prefix: (prefix.count("/"), prefix),
        )
        found: list[str] = []
        proposals = []
        for prefix in prefixes:
            if any(prefix.startswith(shallower) for shallower in found):
                continue
            inside = [pair for path, pair in valid if path.startswith(prefix)]
            if len(inside) >= self.min_pairs and not any(p.startswith(prefix) for p in bad_paths):
                found.append(prefix)
                proposals.append(Proposal(f"{host}{prefix}*", name, tuple(inside)))
        return proposals


def _client_error(status: int) -> bool:
    return 400 <= status < 500
