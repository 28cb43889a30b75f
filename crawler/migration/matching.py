"""The migration matcher: every old document sent to the new page that now holds its content.

:func:`match_sites` reads two stores (a crawl of the old site, a crawl of the new one) and
gives one :class:`~bloom_frontier.migration.answers.MigrationAnswer` per old document (a
page fetched with status 200), from the match features the crawl recorded
(:mod:`bloom_frontier.content.features`). Pure on what it reads. The evidence, strongest
first, each method named as in :data:`~bloom_frontier.migration.answers.METHODS`:

* ``exact``: the same main-content hash, unique on both sides (boilerplate does not count);
* ``near-content``: main-content MinHash similarity of at least :data:`NEAR` with the best
  candidate (LSH candidates, never all pairs) and a clear margin over the next;
* ``title``: a similar title or first heading (site-wide title affixes such as
  ``| Site`` stripped), unique on both sides, with some shared content;
* ``url-tokens`` and ``graph``: the words of the path, and the old page's links whose
  targets are already matched found again among the candidate's links: both only add to
  content evidence, and decide a page too short for its content to tell;
* ``merged``: an old page whose main content is contained in a new page that also holds
  another old page, its first heading among that page's headings (both answers say so);
* ``ambiguous`` (not an entry): two candidates too close to tell, ``runner_up`` filled;
* ``removed`` (not an entry): nothing holds the content; ``suggestion`` is the new page of
  its nearest matched parent (a page linking to it, the closest in path), else ``410``.

One to one: a new page goes to the old page with the strongest evidence; another old page
claiming it with strong evidence of its own is ambiguous, with weak evidence removed.

Old redirects are answered as ``scrapy redirects`` reads them
(:func:`~bloom_frontier.redirectmap.semantics.redirect_sources`): each source that is a map
entry there gets its document's answer, method ``redirect``; other sources (loops, errors,
off-site) get none.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

from bloom_frontier.canonical import InvalidURL
from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet, rewrite_path
from bloom_frontier.canonical.structural import canonicalize
from bloom_frontier.content.fingerprint import NUM_PERM, SOFT_404
from bloom_frontier.content.lsh import BandIndex
from bloom_frontier.migration.answers import MigrationAnswer
from bloom_frontier.pipelines.reader import StoredDocument, StoreReader
from bloom_frontier.pipelines.records import MatchFeatures
from bloom_frontier.redirectmap.semantics import (
    MapOptions,
    as_uri,
    redirect_sources,
    without_dropped_params,
)

#: The similarity the LSH index finds candidates around (a banding of ``NUM_PERM`` values).
CANDIDATE_THRESHOLD = 0.5
#: Main-content similarity at or above which the best candidate is the page (with a margin).
NEAR = 0.6
#: How far ahead of the next candidate the best one must be (similarity).
MARGIN = 0.15
#: Least similarity a title match needs (removed pages share none with a namesake).
TITLE_CONTENT = 0.25
#: Share of an old page's main content a new page must hold to count as merged into it.
CONTAINED = 0.7
#: The share a page under the old page's heading must hold (the heading is evidence too; a
#: small page's share is estimated from a low similarity, so with a wide error).
UNDER_HEADING = 0.5
#: A main content of fewer words is short: its similarity says little.
SHORT = 40
#: Candidates from a title or heading index are taken only from groups this small.
GROUP = 8
#: Pages sharing a heading that are looked at for a merged page (its content measured in each).
HEADING_HOSTS = 200
#: Progress lines: one every this many old documents.
PROGRESS_EVERY = 10_000

_SEPARATORS = re.compile(r"\s+(?:[|\u2014\u2013:\u00b7]|-|::)\s+")
_HEADING_MARKS = re.compile(r"[\u00b6\u00a7#]+\s*$")
_TOKEN = re.compile(r"[a-z0-9]+")
_STOP_TOKENS = frozenset({"html", "htm", "php", "aspx", "index", "www", "en"})


@dataclass
class _Side:
    """One site's documents, as arrays and indexes the matcher reads."""

    urls: list[str]
    features: list[MatchFeatures]
    signatures: np.ndarray  # documents x NUM_PERM, uint32
    titles: list[str]
    first_headings: list[str]
    children: list[set[int]]  # the documents each links to
    parents: list[set[int]]  # the documents linking to each

    @classmethod
    def of(cls, documents: dict[str, MatchFeatures]) -> _Side:
        urls = list(documents)
        features = [documents[url] for url in urls]
        signatures = np.frombuffer(
            b"".join(feature.main_minhash for feature in features), dtype="<u4"
        ).reshape(len(features), NUM_PERM)
        affixes = _common_affixes(feature.title for feature in features)
        titles = [_title(feature.title, affixes) for feature in features]
        heads = [_heading(feature.headings[0]) if feature.headings else "" for feature in features]
        positions = {url: position for position, url in enumerate(urls)}
        children: list[set[int]] = [set() for _ in urls]
        parents: list[set[int]] = [set() for _ in urls]
        for position, feature in enumerate(features):
            for link in feature.outlinks:
                child = positions.get(document_url(link))
                if child is not None and child != position:
                    children[position].add(child)
                    parents[child].add(position)
        return cls(urls, features, signatures, titles, heads, children, parents)

    def neighbours(self, position: int) -> set[int]:
        return self.children[position] | self.parents[position]


@dataclass
class _Proposal:
    """An old document's best candidate, with what speaks for it."""

    old: int
    new: int | None
    method: str
    confidence: float
    reason: str
    runner_up: int | None = None
    runner_up_confidence: float | None = None
    contained: float = 0.0
    #: For a page left ambiguous or removed: its best candidates, for a second look.
    candidates: tuple[int, ...] = ()


def _heading(text: str) -> str:
    """A heading as compared: lower-cased, whitespace collapsed, anchor marks dropped."""
    return " ".join(_HEADING_MARKS.sub("", text).lower().split())


def _segments(title: str) -> list[str]:
    return [part.strip() for part in _SEPARATORS.split(title) if part.strip()]


def _common_affixes(titles: Iterable[str]) -> frozenset[str]:
    """Title segments (split at ``|``, ``—``, ``-``...) that start or end a fifth or more of
    a site's titles: its name, not a page's."""
    titles = list(titles)
    ends: Counter[str] = Counter()
    for title in titles:
        parts = _segments(title)
        if len(parts) > 1:
            ends.update({parts[0].lower(), parts[-1].lower()})
    floor = max(3, len(titles) // 5)
    return frozenset(part for part, count in ends.items() if count >= floor)


def _title(title: str, affixes: frozenset[str]) -> str:
    parts = [part for part in _segments(title) if part.lower() not in affixes]
    return _heading(" ".join(parts))


def _tokens(url: str) -> frozenset[str]:
    """The words of a URL's path (file extensions and ``index`` left out)."""
    return frozenset(_TOKEN.findall(urlsplit(url).path.lower())) - _STOP_TOKENS


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def document_url(url: str, rules: RuleSet = DEFAULT_RULES) -> str:
    """A document's URL as the matcher names it: without the parameters its key drops, in
    its stage-1 canonical form, its path as its dedupe key reads it (session path
    parameters such as ``;jsessionid=`` dropped, runs of ``/`` as one, as the host's rules
    say): a crawl keeps the first spelling it met (``%6e`` for ``n``, ``:80``, ``//``,
    parameters in another order). As an ASCII URI."""
    kept = without_dropped_params(url, rules)
    with suppress(InvalidURL):  # else kept as written: still the page's own URL
        kept = canonicalize(kept)
    parts = urlsplit(kept)
    if "//" in parts.path or ";" in parts.path:  # as the dedupe key reads the path
        rule = rules.rule_for(parts.netloc.lower(), parts.path or "/")
        kept = parts._replace(path=rewrite_path(parts.path, rules, rule, None)).geturl()
    return as_uri(kept)


def documents_of(
    documents: Iterable[StoredDocument], rules: RuleSet = DEFAULT_RULES
) -> dict[str, StoredDocument]:
    """The 200 documents of a store by URL (the final URL as a map writes it, without the
    parameters its key drops); of pages sharing a URL, the first with match features."""
    found: dict[str, StoredDocument] = {}
    for document in documents:
        if document.status != 200:
            continue
        url = document_url(document.final_url, rules)
        if url not in found or found[url].features is None:
            found[url] = document
    return found


def _features(document: StoredDocument) -> MatchFeatures | None:
    """What a document is matched on: nothing for a soft 404."""
    return None if document.kind == SOFT_404 else document.features


def _by_whole_content(
    old: dict[str, StoredDocument], new: dict[str, StoredDocument]
) -> dict[str, MigrationAnswer]:
    """Answers for old documents without match features (not HTML: a PDF, an image, a
    download): the one new document without them that has the same exact fingerprint,
    unique on both sides; else removed, suggesting ``410``."""

    def bare(side: dict[str, StoredDocument]) -> defaultdict[str, list[str]]:
        found: defaultdict[str, list[str]] = defaultdict(list)
        for url, document in side.items():
            if _features(document) is None and document.kind != SOFT_404 and document.content_hash:
                found[document.content_hash].append(url)
        return found

    old_hashes, new_hashes = bare(old), bare(new)
    answers = {}
    for url, document in old.items():
        if _features(document) is not None:
            continue
        digest = document.content_hash or ""
        targets = new_hashes.get(digest, [])
        if len(targets) == 1 and len(old_hashes[digest]) == 1:
            answers[url] = MigrationAnswer(
                url, targets[0], 1.0, "exact", True, "same content (not HTML: the whole body)"
            )
        else:
            answers[url] = MigrationAnswer(
                url, None, 0.0, "removed", False,
                "no new document has its content (without match features: not HTML, a soft "
                "404, or crawled before they were recorded)",
                suggestion="410",
            )  # fmt: skip
    return answers


class _Matcher:
    """Matching of one old side against one new side (see the module docstring)."""

    def __init__(self, old: _Side, new: _Side, progress: Callable[[str], None] | None) -> None:
        self.old, self.new, self.progress = old, new, progress
        self.index: BandIndex[int] = BandIndex(CANDIDATE_THRESHOLD)
        self.by_hash: defaultdict[str, list[int]] = defaultdict(list)
        self.by_title: defaultdict[str, list[int]] = defaultdict(list)
        self.by_heading: defaultdict[str, list[int]] = defaultdict(list)
        for position, feature in enumerate(new.features):
            if feature.main_shingles:
                self.index.insert(position, feature.main_minhash)
            self.by_hash[feature.main_hash].append(position)
            for key in {new.titles[position], new.first_headings[position]} - {""}:
                self.by_title[key].append(position)
            for heading in {_heading(text) for text in feature.headings}:
                self.by_heading[heading].append(position)
        self.old_hashes = Counter(feature.main_hash for feature in old.features)
        self.old_titles = Counter(old.titles) + Counter(old.first_headings)

    def candidates(self, position: int) -> list[int]:
        feature = self.old.features[position]
        found = set(self.by_hash.get(feature.main_hash, ()))
        if feature.main_shingles:
            found |= self.index.query(feature.main_minhash)
        for key in {self.old.titles[position], self.old.first_headings[position]} - {""}:
            group = self.by_title.get(key, ())
            if len(group) <= GROUP:
                found.update(group)
        return sorted(found)

    def similarities(self, position: int, candidates: list[int]) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        equal = self.new.signatures[candidates] == self.old.signatures[position]
        return equal.mean(axis=1)

    def contained(self, position: int, candidate: int, similarity: float) -> float:
        """The estimated share of the old main content's shingles the candidate holds."""
        size = self.old.features[position].main_shingles
        other = self.new.features[candidate].main_shingles
        if not size or similarity <= 0:
            return 0.0
        return min(1.0, similarity * (size + other) / ((1 + similarity) * size))

    def propose(self, position: int) -> _Proposal:
        """The old document's best candidate and the evidence for it (not yet one to one)."""
        feature = self.old.features[position]
        candidates = self.candidates(position)
        sims = self.similarities(position, candidates)
        same_hash = [c for c in candidates if self.new.features[c].main_hash == feature.main_hash]
        if (
            len(same_hash) == 1
            and self.old_hashes[feature.main_hash] == 1
            and feature.main_length > 0
        ):
            return _Proposal(position, same_hash[0], "exact", 1.0, "same main content")
        if not candidates:
            merged = self.merged_into(position)
            reason = "no page of the new site shares its content or title"
            return merged if merged is not None else self.removed(position, reason)
        scores = [self.score(position, c, float(s)) for c, s in zip(candidates, sims, strict=True)]
        order = sorted(range(len(candidates)), key=lambda i: -scores[i])
        best = order[0]
        second = order[1] if len(order) > 1 else None
        new, sim, score = candidates[best], float(sims[best]), scores[best]
        runner = candidates[second] if second is not None else None
        runner_score = scores[second] if second is not None else 0.0
        title_equal = self.title_equal(position, new)
        short = feature.main_length < SHORT
        contained = self.contained(position, new, sim)
        best_few = tuple(candidates[i] for i in order[:5])
        if runner is not None and score - runner_score < MARGIN and sim >= TITLE_CONTENT:
            return _Proposal(
                position,
                new,
                "ambiguous",
                round(min(score, 1.0), 3),
                f"two close candidates: {score:.2f} and {runner_score:.2f}",
                runner,
                round(min(runner_score, 1.0), 3),
                candidates=best_few,
            )
        if not short and sim >= NEAR:
            return _Proposal(
                position, new, "near-content", round(sim, 3), f"main content {sim:.2f} similar",
                runner, round(min(runner_score, 1.0), 3) if runner is not None else None,
                contained,
            )  # fmt: skip
        if title_equal and (sim >= TITLE_CONTENT or (short and self.unique_title(position))):
            return _Proposal(
                position, new, "title", round(min(0.5 + sim / 2, 0.95), 3),
                f"same title or heading, main content {sim:.2f} similar",
                runner, round(min(runner_score, 1.0), 3) if runner is not None else None,
                contained,
            )  # fmt: skip
        merged = self.merged_into(position)
        if merged is not None:
            return merged
        return self.removed(position, f"closest new page only {sim:.2f} similar", best_few)

    def score(self, position: int, candidate: int, similarity: float) -> float:
        """How strongly a candidate is the old page: its content similarity, with a little
        for an equal title or heading and for shared path words."""
        bonus = 0.1 if self.title_equal(position, candidate) else 0.0
        tokens = _jaccard(_tokens(self.old.urls[position]), _tokens(self.new.urls[candidate]))
        return similarity + bonus + 0.05 * tokens

    def title_equal(self, position: int, candidate: int) -> bool:
        mine = {self.old.titles[position], self.old.first_headings[position]} - {""}
        theirs = {self.new.titles[candidate], self.new.first_headings[candidate]}
        return bool(mine & theirs)

    def unique_title(self, position: int) -> bool:
        """Its title or first heading names one old page and one new page."""
        for key in {self.old.titles[position], self.old.first_headings[position]} - {""}:
            if self.old_titles[key] == 1 and len(self.by_title.get(key, ())) == 1:
                return True
        return False

    def merged_into(self, position: int) -> _Proposal | None:
        """A new page holding this page's content under its first heading, among others,
        clearly more of it than any other page with that heading (a common heading such as
        "Introduction" is under many: at most :data:`HEADING_HOSTS` are looked at)."""
        head = self.old.first_headings[position]
        if not head:
            return None
        hosts = [c for c in self.by_heading.get(head, ()) if self.new.first_headings[c] != head]
        if not hosts or len(hosts) > HEADING_HOSTS:
            return None
        sims = self.similarities(position, hosts)
        shares = [self.contained(position, c, float(s)) for c, s in zip(hosts, sims, strict=True)]
        order = np.argsort(shares)[::-1]
        best = int(order[0])
        if shares[best] < UNDER_HEADING or (
            len(order) > 1 and shares[order[1]] > shares[best] - 0.3
        ):
            return None
        return _Proposal(
            position,
            hosts[best],
            "merged",
            round(min(shares[best], 0.99), 3),
            f"merged: {shares[best]:.2f} of its main content is in a page under its heading",
            contained=shares[best],
        )

    def removed(self, position: int, reason: str, candidates: tuple[int, ...] = ()) -> _Proposal:
        return _Proposal(position, None, "removed", 0.0, reason, candidates=candidates)

    def second_look(self, proposals: list[_Proposal]) -> None:
        """Old pages left ambiguous or removed, looked at again once the others are matched:
        among their candidates and the unclaimed pages their matched parents link to, one
        with some shared content (or an equal title) whose links meet the new pages of
        theirs (``graph``: at least half of two or more), else whose path has the same words
        (``url-tokens``), each clearly ahead of the others."""
        target_of = {p.old: p.new for p in proposals if p.new is not None and p.method in _RANK}
        claimed = set(target_of.values())
        for proposal in proposals:
            if proposal.method not in ("removed", "ambiguous"):
                continue
            position = proposal.old
            pool = set(proposal.candidates)
            for parent in self.old.parents[position]:
                if (matched := target_of.get(parent)) is not None:
                    pool |= self.new.children[matched]
            pool -= claimed
            found = self.by_graph_or_tokens(position, sorted(pool), target_of)
            if found is None:
                continue
            new, method, confidence, reason = found
            if proposal.method == "ambiguous" and proposal.new != new:
                proposal.runner_up = proposal.new  # else it stays the other close candidate
            proposal.new, proposal.method, proposal.confidence = new, method, confidence
            proposal.reason = reason
            claimed.add(new)
            target_of[position] = new

    def by_graph_or_tokens(
        self, position: int, pool: list[int], target_of: dict[int, int]
    ) -> tuple[int, str, float, str] | None:
        """The one candidate of ``pool`` the link graph, else the URL's words, single out
        (see :meth:`second_look`)."""
        mapped = {target_of[n] for n in self.old.neighbours(position) if n in target_of}
        tokens = _tokens(self.old.urls[position])
        sims = self.similarities(position, pool)
        scored = []
        for candidate, sim in zip(pool, sims, strict=True):
            if sim < TITLE_CONTENT and not self.title_equal(position, candidate):
                continue
            links = self.new.neighbours(candidate)
            graph = len(mapped & links) / len(mapped) if len(mapped) >= 2 else 0.0
            words = _jaccard(tokens, _tokens(self.new.urls[candidate]))
            scored.append((graph, words, float(sim), candidate))
        for rank, method, floor in ((0, "graph", 0.5), (1, "url-tokens", 0.6)):
            ordered = sorted(scored, key=lambda row: row[rank], reverse=True)
            if not ordered or ordered[0][rank] < floor:
                continue
            if len(ordered) > 1 and ordered[1][rank] > ordered[0][rank] - 0.3:
                continue
            graph, words, sim, candidate = ordered[0]
            value = ordered[0][rank]
            what = (
                "of its matched links meet the page's links" if rank == 0 else "path words shared"
            )
            reason = f"{value:.2f} {what}, main content {sim:.2f} similar"
            return candidate, method, round(min(0.5 + value * 0.4, 0.9), 3), reason
        return None

    def match(self) -> list[_Proposal]:
        proposals = []
        total = len(self.old.urls)
        for position in range(total):
            proposals.append(self.propose(position))
            if self.progress is not None and (position + 1) % PROGRESS_EVERY == 0:
                self.progress(f"matched {position + 1:,} of {total:,} old pages")
        one_to_one(proposals)
        self.second_look(proposals)
        return proposals


#: Which proposal keeps a contested new page: the strongest method first, then confidence.
_RANK = {"exact": 4, "near-content": 3, "title": 2, "merged": 1, "graph": 0, "url-tokens": 0}


def one_to_one(proposals: list[_Proposal]) -> None:
    """Give each new page to one old page: the strongest claim keeps it; a merged claim
    (or one holding a merged page's content) shares it, both marked merged; another strong
    claim becomes ambiguous, a weak one removed."""
    claims: defaultdict[int, list[_Proposal]] = defaultdict(list)
    for proposal in proposals:
        if proposal.new is not None and proposal.method in _RANK:
            claims[proposal.new].append(proposal)
    for new, group in claims.items():
        if len(group) == 1:
            continue
        group.sort(key=lambda p: (_RANK[p.method], p.confidence), reverse=True)
        keeper = group[0]
        for other in group[1:]:
            if other.method == "merged" or (
                other.contained >= CONTAINED and keeper.method != "exact"
            ):
                other.method = "merged"
                keeper.method = "merged"
                keeper.reason = f"{keeper.reason}; another old page was merged into it"
            elif other.method in ("exact", "near-content"):
                other.runner_up, other.runner_up_confidence = other.new, other.confidence
                other.method = "ambiguous"
                other.reason = f"its closest new page is the match of another old page ({new})"
            else:
                other.new, other.method, other.confidence = None, "removed", 0.0
                other.reason = "its closest new page is the match of another old page"


def _suggestion(position: int, old: _Side, targets: dict[int, str]) -> str:
    """Where a removed page's visitors could go: the new page of its matched parent closest
    to it in path, else ``410`` (gone)."""
    path = urlsplit(old.urls[position]).path
    matched = [parent for parent in sorted(old.parents[position]) if parent in targets]
    if not matched:
        return "410"

    def closeness(parent: int) -> tuple[int, int]:
        other = urlsplit(old.urls[parent]).path
        common = len(_common_prefix(path, other).rsplit("/", 1)[0])
        return common, -len(other)

    return targets[max(matched, key=closeness)]


def _common_prefix(a: str, b: str) -> str:
    size = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        size += 1
    return a[:size]


def match_documents(
    old: dict[str, StoredDocument],
    new: dict[str, StoredDocument],
    progress: Callable[[str], None] | None = None,
) -> list[MigrationAnswer]:
    """One answer per old document (by URL: :func:`documents_of`),
    matched against the new site's documents (module docstring)."""
    old_side = _Side.of({url: f for url, d in old.items() if (f := _features(d)) is not None})
    new_side = _Side.of({url: f for url, d in new.items() if (f := _features(d)) is not None})
    if progress is not None:
        progress(f"matching {len(old):,} old pages against {len(new):,} new pages")
    matcher = _Matcher(old_side, new_side, progress)
    proposals = matcher.match()
    targets = {
        p.old: new_side.urls[p.new] for p in proposals if p.new is not None and p.method in _RANK
    }
    answers = {}
    for p in proposals:
        url = old_side.urls[p.old]
        target = new_side.urls[p.new] if p.new is not None else None
        runner = new_side.urls[p.runner_up] if p.runner_up is not None else None
        if p.method in _RANK:
            answers[url] = MigrationAnswer(
                url, target, p.confidence, p.method, True, p.reason, runner, p.runner_up_confidence
            )
        elif p.method == "ambiguous":
            answers[url] = MigrationAnswer(
                url, target, p.confidence, "ambiguous", False, p.reason, runner,
                p.runner_up_confidence,
            )  # fmt: skip
        else:
            suggestion = _suggestion(p.old, old_side, targets)
            answers[url] = MigrationAnswer(
                url, None, 0.0, "removed", False, p.reason, suggestion=suggestion
            )
    answers.update(_by_whole_content(old, new))
    return [answers[url] for url in old]


def redirect_answers(
    reader: StoreReader, answers: list[MigrationAnswer], rules: RuleSet = DEFAULT_RULES
) -> list[MigrationAnswer]:
    """The old site's own redirects (map entries of ``scrapy redirects``), each answered as
    the document it ended on."""
    by_url = {answer.old: answer for answer in answers}
    found = []
    rows = redirect_sources(reader.chains(), list(reader.pages()), MapOptions(rules=rules))
    for row in rows:
        if not row.entry or row.target is None or row.source in by_url:
            continue
        document = by_url.get(document_url(row.target, rules))
        if document is None:
            continue
        found.append(
            MigrationAnswer(
                old=row.source,
                new=document.new,
                confidence=document.confidence,
                method="redirect",
                entry=document.entry,
                reason=f"redirected to {row.target} in the old site ({document.method})",
            )
        )
    return found


def match_sites(
    old: StoreReader, new: StoreReader, progress: Callable[[str], None] | None = None
) -> list[MigrationAnswer]:
    """One answer per old document of the ``old`` store, matched against the documents of
    the ``new`` store, then one per old redirect source (module docstring)."""
    old_documents = documents_of(old.documents())
    new_documents = documents_of(new.documents())
    answers = match_documents(old_documents, new_documents, progress)
    return answers + redirect_answers(old, answers)
