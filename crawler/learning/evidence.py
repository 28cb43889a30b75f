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

Evidence must come from pages where the parameter had a chance to matter, spread over the
rule's pattern (its scope): at least ``min_pairs`` distinct paths, :data:`MIN_PATH_SHARE` of
the distinct paths of ``ok`` pages fetched in the scope, and evidence on each page shape
(:func:`page_shape`: a sort neutral on one-item lists says nothing of longer lists; a view
one template ignores says nothing of the other) but for :data:`MAX_UNCOVERED_SHARE` of those
paths. Shapes of forgotten pages stay counted, so forgetting never makes a share easier.

**Bounded memory** (``CANON_LEARN_MEMORY``): the learner remembers at most ``max_pages``
fetched pages with their families and evidence. Past that it forgets the section (of a
host) it was fed from least recently, whole (a family never leaves its path, so none is
split), and keeps only what can veto, in a fixed-size Bloom filter: every parameter the
forgotten pages carried is **barred** in that section and for the whole host, for the rest
of the crawl (a comparison it can no longer make might have been a counter-example; rules
for other sections of the host are still learned); a forgotten page's content never counts
as evidence again (it may be a generic page whose other copies were forgotten); a page or
family base met again is not compared, and bars its parameters. The filter's false
positives only bar more. So forgetting may delay or prevent a proposal, never make one that
unbounded memory would not have made (a test checks this against an unbounded learner on
random crawls).
"""

from __future__ import annotations

import logging
import re
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field

from rbloom import Bloom

from bloom_frontier.content.constants import OK
from bloom_frontier.defaults import CANON_LEARN_MEMORY

#: Entries of the forgotten-facts filter per remembered page (about 2 are added per page
#: forgotten, so it fills once some 8 times ``max_pages`` pages were forgotten; about 2 bytes
#: each), and its false-positive rate. Past its capacity it answers "forgotten" more and more
#: often: more bars, learning slows down, never a wrong proposal (a warning is logged).
FORGOTTEN_PER_PAGE = 16
FORGOTTEN_ERROR_RATE = 0.001

#: Evidence for a rule must come from at least ``min_pairs`` distinct paths and from this
#: share of the distinct paths of ``ok`` pages fetched within its scope (its pattern).
MIN_PATH_SHARE = 0.1
#: Paths of the pattern whose page shape no evidence covers may be at most this share of its
#: observed paths: a parameter neutral on one-item lists says nothing about longer ones.
MAX_UNCOVERED_SHARE = 0.2
#: Elements counted for a page's shape: a template's repeated blocks (list items, table
#: rows, articles, options, images, forms), each count capped: a list of 40 items and one
#: of 41 are the same shape. Not a document's own outline (headings, definition items): on
#: the 530 pages of the Python docs those made 277 shapes, nearly one a page, so evidence
#: never covered a pattern before most of its variants were fetched (21 shapes without).
SHAPE_TAGS = (b"li", b"tr", b"article", b"option", b"img", b"form")
SHAPE_CAP = 16
#: Paths with more numbers than this have no :func:`number_stratum` (left to the credit).
MAX_STRATUM_NUMBERS = 3
#: Hosts whose forgotten pages' shapes are kept (for :data:`MIN_PATH_SHARE` and
#: :data:`MAX_UNCOVERED_SHARE`); past it the least recent host's are dropped, and its host
#: rules are barred (the share of its pattern can no longer be judged).
MAX_FORGOTTEN_HOSTS = 10_000

logger = logging.getLogger(__name__)


def page_shape(body: bytes) -> tuple[int, ...]:
    """How many of each :data:`SHAPE_TAGS` element ``body`` holds (capped at
    :data:`SHAPE_CAP`): byte counts, cheap enough to run on the loop (about 0.1 ms for
    100 kB).

    >>> page_shape(b"<ul><li>a</li><LI class=x>b</li></ul><link rel=x>")[:2]
    (2, 0)
    """
    lower = body.lower()
    return tuple(
        min(SHAPE_CAP, lower.count(b"<" + tag + b">") + lower.count(b"<" + tag + b" "))
        for tag in SHAPE_TAGS
    )


@dataclass(frozen=True)
class Page:
    """A fetched page as learning sees it: its final URL and key, content and status."""

    url: str
    key: str
    exact: str
    kind: str
    status: int
    #: The page's structure (:func:`page_shape`): pages of one pattern that differ in it
    #: (one item listed or three, another template) are not proof for each other.
    shape: tuple[int, ...] = ()


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
    (url, url, fingerprint, path, shape), counter-examples, and the paths and shapes where a
    comparison (evidence or re-check) found the parameter neutral."""

    evidence: dict[str, tuple[str, str, str, str, tuple[int, ...]]] = field(default_factory=dict)
    counters: list[CounterExample] = field(default_factory=list)
    families_by_content: defaultdict[str, set[str]] = field(
        default_factory=lambda: defaultdict(set)
    )
    compared_paths: set[str] = field(default_factory=set)
    #: The :func:`number_stratum` of each path compared.
    compared_strata: set[str] = field(default_factory=set)
    evidence_shapes: set[tuple[int, ...]] = field(default_factory=set)

    def compare(self, path: str) -> None:
        """A comparison found the parameter neutral on ``path``."""
        self.compared_paths.add(path)
        if (stratum := number_stratum(path)) is not None:
            self.compared_strata.add(stratum)


def number_stratum(path: str) -> str | None:
    """The stratum of a numbered path: each number's magnitude (half its bit length, rounded
    up: 0-3, 4-15, 16-63, ...), so ``/news/5`` and ``/cat/12`` share one and ``/news/2`` is
    in another; None for a path without a number. A parameter neutral until page N shows in
    the strata below N, which a re-check samples each once (per rule, over its scope: one
    stratum for all of a host's numbered sections keeps the extra fetches few).

    >>> number_stratum("/news/5"), number_stratum("/cat/12"), number_stratum("/news/2")
    ('2', '2', '1')
    >>> number_stratum("/about") is None
    True
    """
    numbers = re.findall(r"\d+", path)
    if not numbers or len(numbers) > MAX_STRATUM_NUMBERS:
        return None
    return ".".join(str(max(1, (int(number[:18]).bit_length() + 1) // 2)) for number in numbers)


@dataclass
class _Section:
    """What the learner remembers of one section of a host (a top-level directory, or a
    page at the root): its pages (key -> first page fetched with it), families ((name, key
    without it) -> a page; a family never leaves its path) and tallies (by parameter)."""

    pages: dict[str, Page] = field(default_factory=dict)
    #: Distinct paths of its ``ok`` pages (the patterns' observed paths), by shape.
    ok_paths: dict[str, tuple[int, ...]] = field(default_factory=dict)
    families: dict[tuple[str, str], Page] = field(default_factory=dict)
    names_by_base: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    tallies: defaultdict[str, _Tally] = field(default_factory=lambda: defaultdict(_Tally))


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


def section_of(path: str) -> str:
    """The section of the site ``path`` is in: its top-level directory, or itself at the
    root.

    >>> section_of("/docs/api/x.html"), section_of("/x.html"), section_of("/docs/")
    ('/docs/', '/x.html', '/docs/')
    """
    return (path_prefixes(path) or [path])[0]


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

    def __init__(self, min_pairs: int = 3, max_pages: int = CANON_LEARN_MEMORY) -> None:
        self.min_pairs = max(1, min_pairs)
        self.max_pages = max(1, max_pages)
        #: (host, section) -> its memory, least recently fed first.
        self._sections: OrderedDict[tuple[str, str], _Section] = OrderedDict()
        self._sections_of_host: defaultdict[str, set[str]] = defaultdict(set)
        self._paths_by_content: defaultdict[str, set[str]] = defaultdict(set)
        self._forgotten_capacity = self.max_pages * FORGOTTEN_PER_PAGE
        self._forgotten = Bloom(self._forgotten_capacity, FORGOTTEN_ERROR_RATE)
        self._forgotten_entries = 0
        #: Per host, the shapes of the ``ok`` paths of its sections forgotten: they stay
        #: observed (forgetting must not make a share easier to reach).
        self._forgotten_shapes: OrderedDict[str, Counter[tuple[int, ...]]] = OrderedDict()
        #: Pages remembered now, and forgotten so far (with their sections).
        self.remembered = 0
        self.forgotten_pages = 0

    def observe(self, page: Page) -> tuple[set[tuple[str, str]], list[CounterExample]]:
        """Record ``page``; return the (host, parameter) whose evidence changed and the new
        counter-examples."""
        parts = split_key(page.key)
        if parts is None:
            return set(), []
        host, path, query = parts
        where = (host, section_of(path))
        memory = self._sections.get(where)
        if memory is not None and page.key in memory.pages:
            return set(), []
        names = {p.partition("=")[0].lower() for p in query.split("&")} if query else set()
        if f"b\t{page.key}" in self._forgotten:  # met before, forgotten (or a false positive)
            known = memory.names_by_base.get(page.key, set()) if memory else set()
            self._unknown(page, where, names | known)
            return set(), []
        if memory is None:
            memory = self._sections[where] = _Section()
            self._sections_of_host[host].add(where[1])
        self._sections.move_to_end(where)
        memory.pages[page.key] = page
        if page.kind == OK:
            memory.ok_paths.setdefault(path, page.shape)
        self.remembered += 1
        paths = self._paths_by_content[page.exact]
        if len(paths) < 2:  # one path or more: all that matters
            paths.add(path)
        touched: set[tuple[str, str]] = set()
        counters: list[CounterExample] = []
        for name in sorted(names):
            base = without_param(page.key, name)
            if f"b\t{base}" in self._forgotten:  # its family was forgotten: cannot compare
                self._bar(where, name)
                continue
            other = memory.pages.get(base) or memory.families.get((name, base))
            memory.families.setdefault((name, base), page)
            memory.names_by_base[base].add(name)
            if other is not None:
                self._compare(memory, name, base, other, page, touched, counters)
        for name in sorted(memory.names_by_base.get(page.key, ())):
            member = memory.families.get((name, page.key))
            if member is not None:
                self._compare(memory, name, page.key, member, page, touched, counters)
        while self.remembered > self.max_pages:
            self._forget(next(iter(self._sections)))
        return touched, counters

    def _bar(self, where: tuple[str, str], name: str) -> None:
        """No rule for ``name`` on the host, nor in the section, of ``where``: a comparison
        there was lost."""
        host, section = where
        self._add_forgotten(f"x\t{host}\t{name}")
        self._add_forgotten(f"s\t{host}\t{name}\t{section}")

    def _unknown(self, page: Page, where: tuple[str, str], names: set[str]) -> None:
        """``page`` cannot be compared as unbounded memory would (it was forgotten): bar
        the parameters it carries or is a base for, and never count its content or compare
        with it as a base."""
        for name in names:
            self._bar(where, name)
        self._add_forgotten(f"c\t{page.exact}")
        self._add_forgotten(f"b\t{page.key}")

    def _add_forgotten(self, fact: str) -> None:
        self._forgotten.add(fact)
        self._forgotten_entries += 1
        if self._forgotten_entries == self._forgotten_capacity:
            logger.warning(
                "Parameter-rule learning has forgotten more than its memory holds: it will "
                "learn less and less from now on (raise CANON_LEARN_MEMORY)"
            )

    def _forget(self, where: tuple[str, str]) -> None:
        """Forget a section whole, keeping what can veto (see the module docstring)."""
        memory = self._sections.pop(where)
        host, section = where
        self._sections_of_host[host].discard(section)
        if not self._sections_of_host[host]:
            del self._sections_of_host[host]
        names = set(memory.tallies)
        if memory.ok_paths:
            shapes = self._forgotten_shapes.setdefault(host, Counter())
            shapes.update(memory.ok_paths.values())
            self._forgotten_shapes.move_to_end(host)
            self._add_forgotten(f"o\t{host}\t{section}")  # no prefix rule there is judged
            if len(self._forgotten_shapes) > MAX_FORGOTTEN_HOSTS:
                dropped, _ = self._forgotten_shapes.popitem(last=False)
                self._add_forgotten(f"o\t{dropped}")
        for page in memory.pages.values():
            self._add_forgotten(f"b\t{page.key}")  # met again: not compared, nor compared with
            self._add_forgotten(f"c\t{page.exact}")
            self._paths_by_content.pop(page.exact, None)
        for base, family_names in memory.names_by_base.items():
            if base not in memory.pages:
                self._add_forgotten(f"b\t{base}")
            names |= family_names
        for name in names:
            self._bar(where, name)
        self.remembered -= len(memory.pages)
        self.forgotten_pages += len(memory.pages)

    def _compare(
        self,
        memory: _Section,
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
        tally = memory.tallies[name]
        if a.kind == OK and b.kind == OK:
            if a.exact == b.exact:
                tally.evidence.setdefault(base, (a.url, b.url, a.exact, path, a.shape))
                tally.families_by_content[a.exact].add(base)
                tally.compare(path)
                tally.evidence_shapes.add(a.shape)
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

    def _tallies(self, host: str, name: str) -> list[_Tally]:
        sections = (self._sections[host, section] for section in self._sections_of_host[host])
        return [memory.tallies[name] for memory in sections if name in memory.tallies]

    def page(self, key: str) -> Page | None:
        """The first page fetched with ``key``, if remembered."""
        parts = split_key(key)
        memory = self._sections.get((parts[0], section_of(parts[1]))) if parts else None
        return memory.pages.get(key) if memory else None

    def pages_of(self, host: str) -> list[Page]:
        """The pages of ``host`` remembered now."""
        return [
            page
            for section in self._sections_of_host.get(host, ())
            for page in self._sections[host, section].pages.values()
        ]

    def merged_into(self, key: str, names: list[str]) -> Page | None:
        """A page fetched that a rule dropping ``names`` keys as ``key``: the one fetched
        with ``key`` itself, else one differing from it by one of ``names`` alone (the
        first of its family), if remembered."""
        found = self.page(key)
        parts = split_key(key)
        memory = self._sections.get((parts[0], section_of(parts[1]))) if parts else None
        for name in names:
            if found is not None or memory is None:
                break
            found = memory.families.get((name, key))
        return found

    def family_names(self, key: str) -> set[str]:
        """The parameters of the remembered pages differing from ``key`` by one of them
        alone (``from`` for ``/a`` once ``/a?from=nav`` was fetched)."""
        parts = split_key(key)
        memory = self._sections.get((parts[0], section_of(parts[1]))) if parts else None
        return set(memory.names_by_base.get(key, ())) if memory else set()

    def confirm(self, host: str, name: str, page: Page) -> None:
        """A re-check found ``name`` neutral on ``page`` (the page its variant was merged
        into): its path is compared (not evidence for a new rule; nor its shape covered,
        which takes evidence, as another value may not be neutral there)."""
        parts = split_key(page.key)
        memory = self._sections.get((host, section_of(parts[1]))) if parts else None
        if parts is not None and memory is not None:
            memory.tallies[name].compare(parts[1])

    def compared(self, host: str, name: str, page: Page) -> tuple[bool, bool, bool]:
        """Whether a comparison found ``name`` neutral on ``page``'s path, and on its
        :func:`number_stratum` (True for a path without one), and evidence on a page of its
        shape, on ``host``: what a re-check samples first is what is not."""
        parts = split_key(page.key)
        tallies = self._tallies(host, name) if host in self._sections_of_host else []
        path = parts[1] if parts else ""
        stratum = number_stratum(path)
        return (
            any(path in tally.compared_paths for tally in tallies),
            stratum is None or any(stratum in tally.compared_strata for tally in tallies),
            any(page.shape in tally.evidence_shapes for tally in tallies),
        )

    def compared_paths(self, host: str, name: str) -> int:
        """How many paths of ``host`` a comparison found ``name`` neutral on."""
        if host not in self._sections_of_host:
            return 0
        return sum(len(tally.compared_paths) for tally in self._tallies(host, name))

    def _observed(self, host: str, prefix: str | None) -> dict[str, tuple[int, ...]]:
        """Distinct paths (with their shapes) of the ``ok`` pages remembered on ``host``
        under ``prefix`` (None: the whole host): the pattern's observed paths."""
        sections = (
            [section_of(prefix)] if prefix is not None else list(self._sections_of_host[host])
        )
        observed: dict[str, tuple[int, ...]] = {}
        for section in sections:
            memory = self._sections.get((host, section))
            if memory is not None:
                observed.update(
                    (path, shape)
                    for path, shape in memory.ok_paths.items()
                    if prefix is None or path.startswith(prefix)
                )
        return observed

    def _spread(
        self, host: str, prefix: str | None, valid: list[tuple[str, tuple[int, ...]]]
    ) -> bool:
        """True if evidence from ``valid`` (path, shape) is spread enough over the pattern
        (``host`` under ``prefix``): ``min_pairs`` distinct paths, :data:`MIN_PATH_SHARE`
        of its observed paths, and every shape but :data:`MAX_UNCOVERED_SHARE` of them."""
        if prefix is None and f"o\t{host}" in self._forgotten:
            return False
        if prefix is not None and f"o\t{host}\t{section_of(prefix)}" in self._forgotten:
            return False
        paths = {path for path, _ in valid}
        shapes = {shape for _, shape in valid}
        observed = Counter(self._observed(host, prefix).values())
        if prefix is None:
            observed.update(self._forgotten_shapes.get(host, Counter()))
        total = observed.total()
        uncovered = sum(count for shape, count in observed.items() if shape not in shapes)
        return (
            len(paths) >= self.min_pairs
            and len(paths) >= MIN_PATH_SHARE * total
            and uncovered <= MAX_UNCOVERED_SHARE * total
        )

    def counters(self, host: str, name: str) -> list[CounterExample]:
        """The counter-examples to dropping ``name`` on ``host`` remembered now."""
        if host not in self._sections_of_host:
            return []
        return [counter for tally in self._tallies(host, name) for counter in tally.counters]

    def add_counter(self, counter: CounterExample) -> None:
        """A counter-example found elsewhere (a re-check): no scope covering it is proposed."""
        where = (counter.host, section_of(counter.path))
        memory = self._sections.get(where)
        if memory is None:  # forgotten: what it said is kept as a bar
            self._bar(where, counter.param)
        else:
            memory.tallies[counter.param].counters.append(counter)

    def proposals(self, host: str, name: str) -> list[Proposal]:
        """The scopes where dropping ``name`` on ``host`` is proven now (possibly none)."""
        if host not in self._sections_of_host:
            return []
        tallies = self._tallies(host, name)
        families_by_content: Counter[str] = Counter()
        for tally in tallies:
            for exact, bases in tally.families_by_content.items():
                families_by_content[exact] += len(bases)
        valid = [
            (path, shape, (url_a, url_b))
            for _, (url_a, url_b, exact, path, shape) in sorted(
                entry for tally in tallies for entry in tally.evidence.items()
            )
            if len(self._paths_by_content.get(exact, ())) == 1
            and families_by_content[exact] == 1
            and f"c\t{exact}" not in self._forgotten
        ]
        bad_paths = [counter.path for tally in tallies for counter in tally.counters]
        sections = {section_of(path) for path, _, _ in valid}
        if (
            not bad_paths
            and len(valid) >= self.min_pairs
            and len(sections) >= 2
            and f"x\t{host}\t{name}" not in self._forgotten
            and self._spread(host, None, [(path, shape) for path, shape, _ in valid])
        ):
            return [Proposal(host, name, tuple(pair for _, _, pair in valid))]
        prefixes = sorted(
            {prefix for path, _, _ in valid for prefix in path_prefixes(path)},
            key=lambda prefix: (prefix.count("/"), prefix),
        )
        found: list[str] = []
        proposals = []
        for prefix in prefixes:
            if any(prefix.startswith(shallower) for shallower in found):
                continue
            if f"s\t{host}\t{name}\t{section_of(prefix)}" in self._forgotten:
                continue
            inside = [(path, shape, pair) for path, shape, pair in valid if path.startswith(prefix)]
            if (
                len(inside) >= self.min_pairs
                and not any(p.startswith(prefix) for p in bad_paths)
                and self._spread(host, prefix, [(path, shape) for path, shape, _ in inside])
            ):
                found.append(prefix)
                proposals.append(
                    Proposal(f"{host}{prefix}*", name, tuple(pair for _, _, pair in inside))
                )
        return proposals


def _client_error(status: int) -> bool:
    return 400 <= status < 500
