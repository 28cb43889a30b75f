"""``scrapy audit-rules``: what the current canonicalization rules would change, before anyone
rebuilds a Bloom filter with them.

The store keeps every URL the crawl fetched or was redirected through with the key it had
(``url_aliases``). This command recomputes each URL's key under the rules in force now
(``bloom_frontier.canonical`` plus ``CANON_HOST_RULES``) and compares the two partitions of URLs:

* a **merge**: URLs that had different keys now share one. A false merge is silent data loss
  (the second page is never fetched again), so review these first;
* a **split**: URLs that shared a key now have different ones (a recrawl of duplicates);
* **rejected**: URLs the new rules refuse (``InvalidURL``, with the reason).

Keys carry their rule version, so the comparison is between groupings, not key strings.
Formats: ``text`` (a summary and each change) or ``jsonl`` (one change per line).

A merge the **applied** learned rules make (the URLs' keys differ without the learned rules,
as they were stored) is what those rules are for: reported (``MERGE ... by applied learned
rules``; ``"expected": true`` in JSONL), and not a reason to stop. Exit status 1 when a merge
is found that a changed rule would make (``CANON_HOST_RULES`` or the built-in rules: URLs
whose stored keys differ share one without the learned rules) or that a **proposed** learned
rule would make among the stored keys (or a conflict), so a deploy script can run it and stop
only on a change to review; 0 otherwise.

It also lists the parameter rules learned from content (:mod:`bloom_frontier.learning`): proposed,
applied and revoked, each with its evidence (URL pairs of equal content: how many, over how
many distinct paths of the pages fetched in the rule's scope, and how alike each pair's stored
content is) or counter-example,
and for a proposal the stored URLs it would merge, flagged ``CONFLICT`` if any of them were
fetched with different content. ``--apply SCOPE?PARAM`` applies a proposal: the next crawl
keys with it (applied rules count as current rules above).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TextIO
from urllib.parse import urlsplit

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from bloom_frontier.canonical import InvalidURL, dedupe_key
from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.commands._failures import fails_cleanly
from bloom_frontier.commands._records import add_format_option, reading_store
from bloom_frontier.content.fingerprint import similarity
from bloom_frontier.learning.state import applied_rules, combined_host_rules
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import APPLIED, PROPOSED, REVOKED, ParamRule, now, write_rows
from bloom_frontier.pipelines.writer import StoreWriter


@dataclass
class Audit:
    """How the stored URL -> key assignment changes under new rules."""

    urls: int = 0
    unchanged_groups: int = 0
    merges: list[dict[str, Any]] = field(default_factory=list)
    splits: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)

    def changes(self) -> list[dict[str, Any]]:
        return [*self.merges, *self.splits, *self.rejected]

    @property
    def unexpected_merges(self) -> list[dict[str, Any]]:
        """The merges not made by applied learned rules (see :func:`mark_expected`)."""
        return [merge for merge in self.merges if not merge.get("expected")]


def mark_expected(
    result: Audit, aliases: Iterable[tuple[str, str]], plain_key: Callable[[str], str]
) -> None:
    """Flag each merge of ``result`` ``expected`` when the applied learned rules alone make
    it: no two of its URLs whose stored keys differ share a key under the rules without
    them (``plain_key``); else a changed rule merges them."""
    stored = dict(aliases)
    for merge in result.merges:
        by_plain: dict[str, set[str]] = defaultdict(set)
        for url in merge["urls"]:
            try:
                by_plain[plain_key(url)].add(stored[url])
            except InvalidURL:
                continue
        merge["expected"] = all(len(keys) == 1 for keys in by_plain.values())


def _regrouping(
    change: str, key_name: str, key: str, others_name: str, others: dict[str, list[str]]
) -> dict[str, Any]:
    """A merge or split as reported: the one key, the keys on the other side (each with its
    URLs in ``others``) and every URL concerned."""
    return {
        "change": change,
        key_name: key,
        others_name: sorted(others),
        "urls": sorted(url for urls in others.values() for url in urls),
    }


def audit(aliases: Iterable[tuple[str, str]], new_key: Callable[[str], str]) -> Audit:
    """Compare the stored ``(url, key)`` pairs with ``new_key(url)``."""
    result = Audit()
    by_old: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    by_new: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for url, old in aliases:
        result.urls += 1
        try:
            new = new_key(url)
        except InvalidURL as exc:
            result.rejected.append(
                {"change": "rejected", "url": url, "old_key": old, "reason": exc.reason}
            )
            continue
        by_old[old][new].append(url)
        by_new[new][old].append(url)
    for new, olds in sorted(by_new.items()):
        if len(olds) > 1:
            result.merges.append(_regrouping("merge", "new_key", new, "old_keys", olds))
    for old, news in sorted(by_old.items()):
        if len(news) > 1:
            result.splits.append(_regrouping("split", "old_key", old, "new_keys", news))
        elif not any(len(by_new[new]) > 1 for new in news):
            result.unchanged_groups += 1
    return result


def proposal_merges(
    aliases: Iterable[tuple[str, str]],
    rules: RuleSet,
    rule: ParamRule,
    contents: dict[str, str],
) -> list[dict[str, Any]]:
    """The merges applying the learned ``rule`` on top of ``rules`` would make among the
    stored ``(url, key)`` pairs of its host; ``conflict`` when the merged URLs were fetched
    with different content (``contents``: URL -> fingerprint)."""
    host = rule.scope.partition("/")[0]
    with_rule = rules.with_host_rules({rule.scope: {"strip": [rule.param]}})
    mine = [(url, key) for url, key in aliases if (urlsplit(url).hostname or "") == host]
    merges = audit(mine, lambda url: dedupe_key(url, with_rule)).merges
    for merge in merges:
        seen = {contents[url] for url in merge["urls"] if url in contents}
        merge["conflict"] = len(seen) > 1
    return merges


def proposal_previews(
    store: StoreReader,
    learned: list[ParamRule],
    aliases: list[tuple[str, str]],
    rules: RuleSet,
) -> dict[str, list[dict[str, Any]]]:
    """Per proposed rule, the merges it would make among the stored ``aliases`` on top of
    ``rules`` (:func:`proposal_merges`, with the stored content fingerprints)."""
    contents = {page["final_url"]: page["content_hash"] for page in store.fingerprinted_pages()}
    return {
        rule.name: proposal_merges(aliases, rules, rule, contents)
        for rule in learned
        if rule.state == PROPOSED
    }


def _path_in(scope: str, url: str) -> str | None:
    """The path of ``url`` if it is within the learned ``scope``, else None."""
    parts = urlsplit(url)
    host, slash, prefix = scope.partition("/")
    if (parts.hostname or "") != host:
        return None
    return parts.path if not slash or parts.path.startswith("/" + prefix.rstrip("*")) else None


def evidence_line(rule: ParamRule, pages: dict[str, dict[str, Any]]) -> str:
    """What a rule's evidence rests on: its pairs, over how many distinct paths of the
    pages fetched within its scope, and how alike each pair's stored content is (the
    MinHash similarity: 1.00 for equal fingerprints; ``pages``: final URL -> page row)."""
    paths = {urlsplit(a).path for a, _ in rule.evidence}
    observed = {path for url in pages if (path := _path_in(rule.scope, url)) is not None}
    alike = []
    for a, b in rule.evidence:
        row_a, row_b = pages.get(a), pages.get(b)
        if row_a is None or row_b is None:
            continue
        if row_a["content_hash"] == row_b["content_hash"]:
            alike.append(1.0)
        elif row_a.get("content_minhash") and row_b.get("content_minhash"):
            alike.append(similarity(row_a["content_minhash"], row_b["content_minhash"]))
    content = (
        f"content similarity {min(alike):.2f}-{max(alike):.2f} over {len(alike)} pairs stored"
        if alike
        else "content not stored"
    )
    return (
        f"  evidence: {len(rule.evidence)} pairs over {len(paths)} distinct paths "
        f"(of {len(observed)} fetched in {rule.scope}); {content}\n"
    )


def write_learned(
    rules: list[ParamRule],
    previews: dict[str, list[Any]],
    out: TextIO,
    pages: dict[str, dict[str, Any]] | None = None,
) -> None:
    states = Counter(rule.state for rule in rules)
    out.write(
        f"\nLearned parameter rules: {states[PROPOSED]} proposed, {states[APPLIED]} applied, "
        f"{states[REVOKED]} revoked\n"
    )
    for rule in rules:
        out.write(f"\n{rule.state.upper()} {rule.name}: {len(rule.evidence)} URL pairs\n")
        out.write(evidence_line(rule, pages or {}))
        out.writelines(f"  same content: {a}  =  {b}\n" for a, b in rule.evidence[:3])
        if rule.counter_example:
            counter = rule.counter_example
            out.write(
                f"  counter-example: {counter['url_a']}  !=  {counter['url_b']} "
                f"({counter['reason']})\n"
            )
        merges = previews.get(rule.name, [])
        if merges:
            conflicts = sum(1 for merge in merges if merge["conflict"])
            out.write(
                f"  would merge {len(merges)} stored keys"
                + (f", CONFLICT in {conflicts} (different content)" if conflicts else "")
                + f"; apply with: scrapy audit-rules --apply '{rule.name}'\n"
            )
        elif rule.state == PROPOSED:
            out.write(f"  apply with: scrapy audit-rules --apply '{rule.name}'\n")


def write_text(result: Audit, stored_version: str, new_version: str, out: TextIO) -> None:
    expected = len(result.merges) - len(result.unexpected_merges)
    out.write(
        f"Rules {stored_version} (stored) -> {new_version} (current): {result.urls} URLs\n"
        f"  unchanged keys: {result.unchanged_groups}\n"
        f"  merges:         {len(result.merges)}  (different keys that would become one)\n"
        + (f"    by applied learned rules: {expected}  (expected)\n" if expected else "")
        + f"  splits:         {len(result.splits)}  (one key that would become several)\n"
        f"  rejected URLs:  {len(result.rejected)}\n"
    )
    for change in result.merges:
        by = " (by applied learned rules)" if change.get("expected") else ""
        out.write(f"\nMERGE into {change['new_key']}{by}\n")
        out.writelines(f"  was {old}\n" for old in change["old_keys"])
    for change in result.splits:
        out.write(f"\nSPLIT {change['old_key']}\n")
        out.writelines(f"  into {new}\n" for new in change["new_keys"])
    for change in result.rejected:
        out.write(f"\nREJECTED {change['url']} ({change['reason']})\n")


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--format text|jsonl] [--rules-version VERSION] [--apply SCOPE?PARAM]"

    def short_desc(self) -> str:
        return "Show which stored keys the current URL rules would merge or split"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_format_option(parser, ("text", "jsonl"))
        parser.add_argument(
            "--rules-version",
            help="compare the aliases stored under this rule version (default: the newest)",
        )
        parser.add_argument(
            "--apply",
            action="append",
            default=[],
            metavar="SCOPE?PARAM",
            help="apply a proposed learned parameter rule (as listed)",
        )

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        with reading_store(self.settings) as store:
            learned = store.param_rules()
            if opts.apply:
                user_rules = self.settings.getdict("CANON_HOST_RULES")
                learned = apply_proposals(store, learned, opts.apply, user_rules)
            versions = store.rules_versions()
            stored_version = opts.rules_version or (versions[-1] if versions else None)
            if stored_version is None and not learned:
                raise UsageError("the store holds no URL aliases yet", print_help=False)
            if stored_version is not None and stored_version not in versions:
                raise UsageError(
                    f"no aliases under rules {stored_version!r} (stored: {versions})",
                    print_help=False,
                )
            user_rules = self.settings.getdict("CANON_HOST_RULES")
            rules = DEFAULT_RULES.with_host_rules(
                combined_host_rules(user_rules, applied_rules(learned))
            )
            plain = DEFAULT_RULES.with_host_rules(user_rules)
            aliases = (
                [(a["url"], a["key"]) for a in store.url_aliases(stored_version)]
                if stored_version
                else []
            )
            result = audit(aliases, lambda url: dedupe_key(url, rules))
            mark_expected(result, aliases, lambda url: dedupe_key(url, plain))
            previews = proposal_previews(store, learned, aliases, rules)
            pages = {page["final_url"]: page for page in store.fingerprinted_pages()}
        if opts.format == "jsonl":
            write_rows(result.changes(), "jsonl", (), sys.stdout)
            learned_rows = (
                {"change": f"learned-{rule.state}", **rule.row(), "merges": previews.get(rule.name)}
                for rule in learned
            )
            write_rows(learned_rows, "jsonl", (), sys.stdout)
        else:
            if stored_version is not None:
                write_text(result, stored_version, rules.version, sys.stdout)
            write_learned(learned, previews, sys.stdout, pages)
        proposed_merges = any(previews.values())  # conflicts are merges too
        self.exitcode = 1 if result.unexpected_merges or proposed_merges else 0


def apply_proposals(
    store: StoreReader,
    learned: list[ParamRule],
    names: list[str],
    user_rules: dict[str, Any],
) -> list[ParamRule]:
    """Mark the named proposals applied in the store, with the rules version they make
    (``CANON_HOST_RULES`` plus every applied rule); UsageError for an unknown name."""
    by_name = {rule.name: rule for rule in learned}
    for name in names:
        rule = by_name.get(name)
        if rule is None or rule.state != PROPOSED:
            proposed = sorted(r.name for r in learned if r.state == PROPOSED)
            raise UsageError(f"no proposed rule {name!r} (proposed: {proposed})", print_help=False)
        by_name[name] = replace(rule, state=APPLIED)
    applied = applied_rules(by_name.values())
    version = DEFAULT_RULES.with_host_rules(combined_host_rules(user_rules, applied)).version
    writer = StoreWriter(store.database)
    for name in names:
        by_name[name] = replace(by_name[name], rules_version=version, updated_at=now())
        writer.add_param_rule(by_name[name])
    writer.flush()
    return list(by_name.values())
