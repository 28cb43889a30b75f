"""``scrapy rebuild-filter SPIDER``: apply a rule change to a crawl's memory, without a recrawl.

Keys the URLs the crawl knows (record store: fetched pages, redirect hops, URL aliases,
canonical hints; frontier: requests leased or failed) under the rules in force now into a
new seen filter, and keeps the old filter as a read-only layer consulted with the old rules
(:mod:`bloom_frontier.seen.layers`): nothing seen becomes unseen, and URLs the new rules merge
with a known one count as seen. Requests still waiting in the queue are keyed again when
they leave it (:mod:`bloom_frontier.learning.gate`): a variant of a page fetched before the
rebuild is dropped then (``learn/dropped_queued``), never fetched; of two variants both
waiting, the first out is fetched. The rules in force are ``CANON_HOST_RULES``
plus the learned parameter rules applied (:mod:`bloom_frontier.learning`: ``scrapy audit-rules
--apply``, or ``CANON_LEARN="apply"``, in the store or the shared crawl's ``<prefix>:learned``)
and not revoked; the filter records both, and the next crawl keys with them.

First prints what ``scrapy audit-rules`` reports for the change (the stored keys it merges or
splits, the learned rules with their evidence), and refuses (exit status 1) when it finds a
merge, unless ``--allow-merges``: a false merge is a page never fetched.

A learned rule revoked since a rebuild (a counter-example found its pages differ) leaves
filters whose keys merged those pages: the next rebuild **retires** every layer keyed under
a revoked rule (``JOBDIR/seen-retired/<n>``, or out of the Redis manifest) instead of keeping
it as an older layer, so the URLs the rule merged count as new again. Only URLs the crawl
never recorded (refused by robots.txt, off the site) are forgotten with it: they are met
and judged again; on a shared crawl, so are the keys workers add to a retired generation
while the rebuild runs (stop them first to save those fetches).

- Embedded crawl (``-s JOBDIR=DIR``): run it while the crawl is stopped (paused with
  Ctrl-C); resume the crawl with the new rules. A crawl running on that ``JOBDIR`` holds
  its lock (:mod:`bloom_frontier.seen.joblock`): the rebuild refuses with one line (exit status 2)
  and changes nothing; a crawl started during the rebuild refuses the same way.
- Shared crawl (``-s REDIS_URL=...``): workers may keep running. The new filter is a new
  generation, switched to in one atomic write of the crawl's layer manifest; keys workers
  add to the old generation meanwhile stay seen (it becomes the newest older layer). Then
  restart the workers with the new rules: a worker started with the old rules refuses to
  start, and one still running them keeps keying into the old generation, where new workers
  still find its keys (at worst it fetches again a page the others fetched).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.spiderloader import get_spider_loader
from scrapy.utils.job import job_dir

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.canonical.rules import DEFAULT_RULES
from bloom_frontier.commands._failures import fails_cleanly
from bloom_frontier.commands._records import reading_store
from bloom_frontier.commands.audit_rules import audit, proposal_previews, write_learned, write_text
from bloom_frontier.learning.state import (
    Learned,
    RedisRuleState,
    combined_host_rules,
    learned_in_force,
)
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import REVOKED
from bloom_frontier.redis_client import redis_from_url, require_bloom
from bloom_frontier.seen.joblock import JobdirLock
from bloom_frontier.seen.layers import (
    ensure_manifest,
    filter_parameters,
    read_rules_file,
    rules_from_record,
    rules_record,
)
from bloom_frontier.seen.rebuild import (
    KeyedUrls,
    jobdir_queued_urls,
    rebuild_jobdir,
    rebuild_redis,
    redis_frontier_entries,
    store_urls,
)


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return (
            "<spider> [--allow-merges] [--previous-rules JSON] (-s JOBDIR=... | -s REDIS_URL=...)"
        )

    def short_desc(self) -> str:
        return "Rebuild the spider's seen filter under the current URL rules"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--allow-merges",
            action="store_true",
            help="rebuild even when the new rules merge URLs that had different keys",
        )
        parser.add_argument(
            "--previous-rules",
            metavar="JSON",
            default="{}",
            help="CANON_HOST_RULES the filter was filled under, for a crawl that did not "
            "record them (default: none, the built-in rules)",
        )

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if len(args) != 1:
            raise UsageError("name the spider whose seen filter to rebuild")
        name = args[0]
        settings = self.settings.copy()
        get_spider_loader(settings).load(name).update_settings(settings)
        try:
            previous = json.loads(opts.previous_rules)
            default_old = rules_record(previous, DEFAULT_RULES.with_host_rules(previous))
        except ValueError as exc:
            raise UsageError(f"--previous-rules: {exc}", print_help=False) from None
        self.default_old, self.allow_merges = default_old, opts.allow_merges
        jobdir = job_dir(settings)
        if settings.get("REDIS_URL"):
            self._shared(name, settings)
        elif jobdir:
            self._embedded(Path(jobdir), settings)
        else:
            raise UsageError(
                "no seen filter to rebuild: set JOBDIR (embedded crawl) or REDIS_URL (shared)",
                print_help=False,
            )

    def _plan(self, store: StoreReader, settings: Any, shared: Learned) -> None:
        """The rules to rebuild under: ``CANON_HOST_RULES`` plus the learned rules in force
        (applied in the store or in the crawl's ``shared`` state, not revoked)."""
        user_rules = settings.getdict("CANON_HOST_RULES")
        self.param_rules = store.param_rules()
        learned = learned_in_force(self.param_rules, shared)
        self.rules = DEFAULT_RULES.with_host_rules(combined_host_rules(user_rules, learned))
        self.record = rules_record(user_rules, self.rules, learned)
        self.revoked = {rule.name for rule in self.param_rules if rule.state == REVOKED}

    def _audit(self, store: StoreReader, old_version: str) -> KeyedUrls | None:
        """Print what ``scrapy audit-rules`` reports for the change from ``old_version``
        (the stored keys' regrouping, the learned rules); None (and exit status 1) if it
        finds a merge that was not allowed, else the store's URLs keyed anew."""
        rules = self.rules
        versions = store.rules_versions()
        stored = old_version if old_version in versions else (versions or [None])[-1]
        aliases = [(a["url"], a["key"]) for a in store.url_aliases(stored)] if stored else []
        result = audit(aliases, lambda url: dedupe_key(url, rules))
        if stored is not None:
            write_text(result, stored, rules.version, sys.stdout)
        if self.param_rules:
            previews = proposal_previews(store, self.param_rules, aliases, rules)
            write_learned(self.param_rules, previews, sys.stdout)
        in_force = [
            f"{scope}?{name}" for scope, names in self.record["learned"].items() for name in names
        ]
        print(f"\nLearned rules in force: {', '.join(in_force) or 'none'}")
        if result.merges and not self.allow_merges:
            print(
                f"Refusing to rebuild: the new rules merge {len(result.merges)} groups "
                "of URLs (above). Review them, then run again with --allow-merges.",
                file=sys.stderr,
            )
            self.exitcode = 1
            return None
        keyed = KeyedUrls()
        keyed.add(store_urls(store), rules)
        return keyed

    def _embedded(self, jobdir: Path, settings: Any) -> None:
        if not (jobdir / "seen").is_dir():
            raise UsageError(
                f"no seen filter in {jobdir}: crawl with this JOBDIR first", print_help=False
            )
        with JobdirLock(jobdir) as lock:
            lock.acquire("scrapy rebuild-filter")
            self._rebuild_jobdir(jobdir, settings)

    def _rebuild_jobdir(self, jobdir: Path, settings: Any) -> None:
        old = read_rules_file(jobdir / "seen") or self.default_old
        with reading_store(settings) as store:
            self._plan(store, settings, {})
            if old["version"] == self.record["version"]:
                print(f"The seen filter in {jobdir} is already keyed under rules {old['version']}")
                return
            rules_from_record(old)  # the old layer must be usable: fail now, not in the crawl
            keyed = self._audit(store, old["version"])
        if keyed is None:
            return
        waiting = sum(1 for _ in jobdir_queued_urls(jobdir))
        older, retired = rebuild_jobdir(
            jobdir, keyed.keys, self.record, old, settings, self.revoked
        )
        where = str(jobdir / "seen")
        self._report(
            keyed, keyed.urls, waiting, self.record["version"], where, older and str(older)
        )
        self._report_retired([str(path) for path in retired])

    def _shared(self, name: str, settings: Any) -> None:
        default_old = self.default_old
        prefix = settings["FRONTIER_KEY_PREFIX"] % {"spider": name}
        client = redis_from_url(settings["REDIS_URL"])
        try:
            require_bloom(client)
            parameters = filter_parameters(settings)
            manifest = ensure_manifest(client, prefix, f"{prefix}:seen", default_old, parameters)
            current = manifest["current"]
            _, shared = RedisRuleState(client, prefix).load()
            with reading_store(settings) as store:
                self._plan(store, settings, shared)
                if current["rules"]["version"] == self.record["version"]:
                    print(f"The seen filter {current['key']} is already keyed under these rules")
                    return
                rules_from_record(current["rules"])
                keyed = self._audit(store, current["rules"]["version"])
            if keyed is None:
                return
            stored, waiting = keyed.urls, 0
            for url, queued in redis_frontier_entries(client, prefix):
                if queued:
                    waiting += 1
                else:
                    keyed.add([url], self.rules)
            new_key, retired = rebuild_redis(
                client, prefix, manifest, keyed.keys, self.record, settings, self.revoked
            )
        finally:
            client.close()
        older = None if current["key"] in retired else current["key"]
        self._report(keyed, stored, waiting, self.record["version"], new_key, older)
        self._report_retired(retired)

    def _report_retired(self, retired: list[str]) -> None:
        if retired:
            print(
                f"Retired {', '.join(retired)}: keyed under learned rules revoked since "
                f"({', '.join(sorted(self.revoked))}), so never consulted again; the URLs "
                "those rules merged count as new (fetched pages are in the new filter)"
            )

    @staticmethod
    def _report(
        keyed: KeyedUrls, stored: int, waiting: int, version: str, where: str, older: str | None
    ) -> None:
        rejected = ", ".join(f"{r}: {n}" for r, n in sorted(keyed.rejected.items()))
        print(
            f"\nRebuilt the seen filter at {where} under rules {version}: {keyed.urls} URLs "
            f"({stored} from the store, {keyed.urls - stored} from the frontier), "
            f"{len(keyed.keys)} keys, {sum(keyed.rejected.values())} rejected"
            + (f" ({rejected})" if rejected else "")
            + (f"; the old filter is kept read-only at {older}" if older else "")
        )
        if waiting:
            print(
                f"{waiting} requests wait in the queue: each is keyed again under these rules "
                "when it leaves it, and dropped if they merge it with a URL known (counted "
                "as learn/dropped_queued)"
            )
