"""What a redirect map says, stated once: every format (nginx, apache, csv, jsonl, bulk, html)
is written from the :class:`SourceRow` list :func:`redirect_sources` returns.

* **One row per redirect source**: every hop source of every recorded chain (not only chain
  starts), the newest record winning. Chains join across records through dedupe keys: a
  chain that stopped at an already-known URL continues where that URL's own chain went.
* **target**: the fetch URL of the document the rest of the chain ends on, without the query
  parameters its dedupe key drops (tracking, session ids), unless ``keep_tracking``; written as
  an ASCII URI (``%``-encoded), which is what a ``Location`` header may carry.
* **status**: permanent only when every hop from this source on is permanent (301/308),
  temporary (302/307) otherwise; 307/308 when every hop keeps the request method (all
  307/308), 301/302 when one may change it (301, 302, 303, refreshes).
* **entry**: a row is a map entry only when its chain ends on a fetched document answering
  below 400, its source is on one of the crawl's own hosts (and not a URL shortener: the
  crawl's own list, :mod:`bloom_frontier.shorteners` plus ``SHORTENER_HOSTS``), the
  target is not the source itself, and it is not flagged soft-404 (``include_flagged`` lets
  flagged ones in). Loops, blocked (private) targets, too-many-hops, errors and chains whose
  end is unknown are never entries; ``skip`` says why a row is not one.
* ``permanent_only`` leaves every row that is not permanent end to end out entirely.
* **referrer**: the page whose link was followed to the source (the ``Referer`` of the
  newest chain starting there); None for a source only reached by redirect, a start URL, or
  a chain recorded without one.

Pure: no I/O; the caller reads the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit, urlunsplit

from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.pipelines.reader import StoredChain, StoredHop
from bloom_frontier.pipelines.records import BLOCKED, ERROR, FETCHED, LOOP, SEEN, TOO_MANY_HOPS
from bloom_frontier.shorteners import Shorteners
from bloom_frontier.soft404 import soft_404_flag

#: The end of a chain is not known: its last target was seen elsewhere and never resolved.
UNRESOLVED = "unresolved"
#: Characters a target keeps as they are; everything else is %-encoded (UTF-8).
URI_SAFE = "!#$%&'()*+,/:;=?@[]~-._"


@dataclass(frozen=True)
class SourceRow:
    """One redirect source and where the map sends it (see the module docstring)."""

    source: str
    source_key: str | None
    target: str | None
    status: int
    hops: int
    hop_statuses: tuple[int, ...]
    permanent: bool
    outcome: str
    final_status: int | None
    flag: str | None
    entry: bool
    skip: str | None
    reason: str | None = None
    #: The source, then each hop's target in order (the audit report shows them).
    urls: tuple[str, ...] = ()
    referrer: str | None = None

    @property
    def host(self) -> str:
        return (urlsplit(self.source).hostname or "").rstrip(".")

    def as_dict(self) -> dict[str, object]:
        """The row as the csv and jsonl exports write it."""
        return {
            "source": self.source,
            "target": self.target,
            "status": self.status,
            "hops": self.hops,
            "hop_statuses": " ".join(map(str, self.hop_statuses)),
            "permanent": self.permanent,
            "outcome": self.outcome,
            "final_status": self.final_status,
            "flag": self.flag,
            "entry": self.entry,
            "skip": self.skip,
            "reason": self.reason,
            "host": self.host,
            "source_key": self.source_key,
            "referrer": self.referrer,
        }


COLUMNS = tuple(SourceRow("", None, None, 0, 0, (), False, "", None, None, False, None).as_dict())


@dataclass(frozen=True)
class MapOptions:
    """The choices a user makes about the map."""

    permanent_only: bool = False
    include_flagged: bool = False
    keep_tracking: bool = False
    hosts: frozenset[str] = frozenset()  # extra own hosts (an old host that only redirects)
    rules: RuleSet = field(default=DEFAULT_RULES)
    #: Hosts whose hops are never entries: the crawl's (``SHORTENER_HOSTS`` included).
    shorteners: Shorteners = field(default_factory=Shorteners)


def combined_status(statuses: Iterable[int]) -> int:
    """The one status that stands for a run of hops.

    >>> combined_status([301, 308]), combined_status([308, 308]), combined_status([301, 302])
    (301, 308, 302)
    >>> combined_status([307, 308]), combined_status([303])
    (307, 302)
    """
    statuses = list(statuses)
    permanent = all(status in (301, 308) for status in statuses)
    keeps_method = all(status in (307, 308) for status in statuses)
    return {(True, True): 308, (True, False): 301, (False, True): 307}.get(
        (permanent, keeps_method), 302
    )


def as_uri(url: str) -> str:
    """``url`` with every character a ``Location`` may not carry %-encoded.

    >>> as_uri('https://e.org/caf\u00e9 "x"?q=<1>')
    'https://e.org/caf%C3%A9%20%22x%22?q=%3C1%3E'
    """
    parts = urlsplit(url)
    host = parts.netloc.encode("idna").decode("ascii") if not parts.netloc.isascii() else ""
    netloc = host or parts.netloc
    return urlunsplit(
        (
            parts.scheme,
            netloc,
            quote(parts.path, safe=URI_SAFE),
            quote(parts.query, safe=URI_SAFE),
            "",
        )
    )


def without_dropped_params(url: str, rules: RuleSet = DEFAULT_RULES) -> str:
    """``url`` without the query parameters its dedupe key drops, the others in order.

    >>> without_dropped_params("https://e.org/p?b=2&utm_source=nl&a=1&fbclid=x")
    'https://e.org/p?b=2&a=1'
    """
    head, sep, query = url.partition("?")
    if not sep:
        return url
    parts = urlsplit(url)
    rule = rules.rule_for(parts.netloc.lower(), parts.path or "/")
    kept = [
        param
        for param in query.split("&")
        if param
        and rules.drop_reason(param.partition("=")[0], param.partition("=")[2], rule) is None
    ]
    return f"{head}?{'&'.join(kept)}" if kept else head


def _node(key: str | None, url: str) -> str:
    return key or url


def _target_node(hop: StoredHop) -> str:
    return _node(hop.target_key, hop.target_url or hop.location)


class _Graph:
    """Recorded hops as edges between dedupe keys, and what is known of where chains ended.

    A hop to its own key (``http`` -> ``https``, a tracking parameter stripped) is no edge: the
    next hop from that key continues the walk.
    """

    def __init__(self, chains: Iterable[StoredChain], pages: Iterable[Mapping[str, object]]):
        self.sources: dict[str, StoredHop] = {}
        self.edges: dict[str, StoredHop] = {}
        self.same_key: dict[str, StoredHop] = {}  # by source URL
        self.ends: dict[str, StoredChain] = {}
        self.pages: dict[str, Mapping[str, object]] = {}
        self.referrers: dict[str, str] = {}  # by source URL: the page linking to it
        for page in pages:
            if page.get("key"):
                self.pages[str(page["key"])] = page
        for chain in chains:  # oldest first: newer records overwrite
            for hop in chain.hops:
                self.sources.pop(hop.source_url, None)
                self.sources[hop.source_url] = hop
                source = _node(hop.source_key, hop.source_url)
                if source != _target_node(hop):
                    self.edges[source] = hop
                else:
                    self.same_key[hop.source_url] = hop
            if chain.outcome != SEEN and chain.hops:
                self.ends[_target_node(chain.hops[-1])] = chain
            if chain.referrer and chain.hops:
                self.referrers[chain.hops[0].source_url] = chain.referrer

    def walk(self, first: StoredHop) -> tuple[list[StoredHop], str, StoredChain | None]:
        """The hops from ``first`` to the end, the end's outcome and the chain that ended
        there (None when only the page records know it)."""
        path = [first]
        visited = {_node(first.source_key, first.source_url)}
        current = _target_node(first)
        self._same_key_hops(path)
        while current in self.edges:
            if current in visited:
                return path, LOOP, None
            visited.add(current)
            path.append(self.edges[current])
            current = _target_node(path[-1])
            self._same_key_hops(path)
        ended = self.ends.get(current)
        if ended is not None:
            return path, ended.outcome, ended
        if current in self.pages:
            return path, FETCHED, None
        return path, UNRESOLVED, None

    def _same_key_hops(self, path: list[StoredHop]) -> None:
        """Append the hops from the URL ``path`` arrived at that keep its key (``http`` ->
        ``https``, a tracking parameter added): no edges, but their statuses count."""
        while (hop := self.same_key.get(path[-1].target_url or "")) is not None and hop not in path:
            path.append(hop)


def own_hosts(
    chains: Iterable[StoredChain],
    pages: Iterable[Mapping[str, object]],
    extra: Iterable[str],
    shorteners: Shorteners,
) -> frozenset[str]:
    """The crawl's own hosts: those of its chain starts and fetched pages, and ``extra``;
    URL shorteners never."""
    urls = [chain.start_url for chain in chains] + [str(page["fetch_url"]) for page in pages]
    hosts = {(urlsplit(url).hostname or "").rstrip(".") for url in urls}
    hosts |= {host.lower().rstrip(".") for host in extra}
    return frozenset(host for host in hosts if host and not shorteners.is_host(host))


def redirect_sources(
    chains: list[StoredChain],
    pages: list[Mapping[str, object]],
    options: MapOptions = MapOptions(),
) -> list[SourceRow]:
    """Every redirect source of the store with its target, status and verdict, in the order
    the sources were first recorded (see the module docstring)."""
    graph = _Graph(chains, pages)
    hosts = own_hosts(chains, pages, options.hosts, options.shorteners)
    order = {url: index for index, url in enumerate(
        dict.fromkeys(hop.source_url for chain in chains for hop in chain.hops)
    )}  # fmt: skip
    rows = []
    for first in sorted(graph.sources.values(), key=lambda hop: order[hop.source_url]):
        row = _row(graph, first, hosts, options)
        if row.permanent or not options.permanent_only:
            rows.append(row)
    return rows


def _row(graph: _Graph, first: StoredHop, hosts: frozenset[str], options: MapOptions) -> SourceRow:
    path, outcome, ended = graph.walk(first)
    statuses = tuple(hop.status for hop in path)
    status = combined_status(statuses)
    target = final_status = flag = skip = reason = None
    if outcome == FETCHED:
        final_url = path[-1].target_url or path[-1].location
        page = graph.pages.get(_target_node(path[-1]))
        final_status = int(page["status"]) if page else None  # type: ignore[call-overload]
        kept = (
            final_url if options.keep_tracking else without_dropped_params(final_url, options.rules)
        )
        target = as_uri(kept)
        flag = soft_404_flag(first.source_url, final_url)
        source_host = (urlsplit(first.source_url).hostname or "").rstrip(".")
        if final_status is not None and final_status >= 400:
            skip = f"final-status-{final_status}"
        elif options.shorteners.is_host(source_host):
            skip = "shortener"
        elif source_host not in hosts:
            skip = "other-host"
        elif _same_resource(first.source_url, target, options.rules):
            skip = "self"
        elif flag and not options.include_flagged:
            skip = "flagged"
    else:
        skip = outcome
        reason = ended.reason if ended is not None and outcome in (BLOCKED, ERROR) else None
    return SourceRow(
        source=first.source_url,
        source_key=first.source_key,
        target=target,
        status=status,
        hops=len(path),
        hop_statuses=statuses,
        permanent=status in (301, 308),
        outcome=outcome,
        final_status=final_status,
        flag=flag,
        entry=skip is None,
        skip=skip,
        reason=reason,
        urls=(first.source_url, *(hop.target_url or hop.location for hop in path)),
        referrer=graph.referrers.get(first.source_url),
    )


def _same_resource(source: str, target: str, rules: RuleSet) -> bool:
    """The target is the source itself once the parameters its key drops are gone: an entry
    would redirect a URL to itself."""
    return as_uri(without_dropped_params(source, rules)) == target


#: Outcomes that end a chain without a document (never entries).
DEAD_ENDS = (LOOP, BLOCKED, TOO_MANY_HOPS, ERROR, UNRESOLVED)
