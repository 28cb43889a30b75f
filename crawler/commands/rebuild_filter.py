"""``scrapy rebuild-filter SPIDER``: apply a rule change to a crawl's memory, without a recrawl.

Keys the URLs the crawl knows (record store: fetched pages, redirect hops, URL aliases,
canonical hints; frontier: requests queued, leased, staged or failed) under the rules in
force now (``CANON_HOST_RULES``) into a new seen filter, and keeps the old filter as a
read-only layer consulted with the old rules (:mod:`crawler.seen.layers`): nothing seen
becomes unseen, and URLs the new rules merge with a known one count as seen.

First prints what ``scrapy audit-rules`` reports for the change, and refuses (exit status 1)
when it finds a merge, unless ``--allow-merges``: a false merge is a page never fetched.

- Embedded crawl (``-s JOBDIR=DIR``): run it while the crawl is stopped (paused with
  Ctrl-C); resume the crawl with the new rules. A crawl running on that ``JOBDIR`` holds
  its lock (:mod:`crawler.seen.joblock`): the rebuild refuses with one line (exit status 2)
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

from crawler.canonical import dedupe_key
from crawler.canonical.rules import DEFAULT_RULES, rules_from_settings
from crawler.commands._failures import fails_cleanly
from crawler.commands._records import reading_store
from crawler.commands.audit_rules import audit, write_text
from crawler.redis_client import redis_from_url, require_bloom
from crawler.seen.joblock import JobdirLock
from crawler.seen.layers import (
    ensure_manifest,
    filter_parameters,
    read_rules_file,
    rules_from_record,
    rules_record,
    settings_rules_record,
)
from crawler.seen.rebuild import (
    KeyedUrls,
    jobdir_queued_urls,
    rebuild_jobdir,
    rebuild_redis,
    redis_frontier_urls,
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
        rules = rules_from_settings(settings)
        record = settings_rules_record(settings, rules)
        try:
            previous = json.loads(opts.previous_rules)
            default_old = rules_record(previous, DEFAULT_RULES.with_host_rules(previous))
        except ValueError as exc:
            raise UsageError(f"--previous-rules: {exc}", print_help=False) from None
        self.record, self.default_old, self.allow_merges = record, default_old, opts.allow_merges
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

    def _audit(self, settings: Any, old_version: str) -> KeyedUrls | None:
        """Print the audit of the change from ``old_version``; None (and exit status 1) if
        it finds a merge that was not allowed, else the store's URLs keyed anew."""
        rules = rules_from_settings(settings)
        keyed = KeyedUrls()
        with reading_store(settings) as store:
            versions = store.rules_versions()
            stored = old_version if old_version in versions else (versions or [None])[-1]
            if stored is not None:
                aliases = ((a["url"], a["key"]) for a in store.url_aliases(stored))
                result = audit(aliases, lambda url: dedupe_key(url, rules))
                write_text(result, stored, rules.version, sys.stdout)
                if result.merges and not self.allow_merges:
                    print(
                        f"Refusing to rebuild: the new rules merge {len(result.merges)} groups "
                        "of URLs (above). Review them, then run again with --allow-merges.",
                        file=sys.stderr,
                    )
                    self.exitcode = 1
                    return None
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
        record = self.record
        old = read_rules_file(jobdir / "seen") or self.default_old
        if old["version"] == record["version"]:
            print(f"The seen filter in {jobdir} is already keyed under rules {record['version']}")
            return
        rules_from_record(old)  # the old layer must be usable: fail now, not in the crawl
        keyed = self._audit(settings, old["version"])
        if keyed is None:
            return
        stored = keyed.urls
        keyed.add(jobdir_queued_urls(jobdir), rules_from_settings(settings))
        older = rebuild_jobdir(jobdir, keyed.keys, record, old, settings)
        self._report(keyed, stored, record["version"], str(jobdir / "seen"), older and str(older))

    def _shared(self, name: str, settings: Any) -> None:
        record, default_old = self.record, self.default_old
        prefix = settings["FRONTIER_KEY_PREFIX"] % {"spider": name}
        client = redis_from_url(settings["REDIS_URL"])
        try:
            require_bloom(client)
            parameters = filter_parameters(settings)
            manifest = ensure_manifest(client, prefix, f"{prefix}:seen", default_old, parameters)
            current = manifest["current"]
            if current["rules"]["version"] == record["version"]:
                print(f"The seen filter {current['key']} is already keyed under these rules")
                return
            rules_from_record(current["rules"])
            keyed = self._audit(settings, current["rules"]["version"])
            if keyed is None:
                return
            stored = keyed.urls
            keyed.add(redis_frontier_urls(client, prefix), rules_from_settings(settings))
            new_key = rebuild_redis(client, prefix, manifest, keyed.keys, record, settings)
        finally:
            client.close()
        self._report(keyed, stored, record["version"], new_key, current["key"])

    @staticmethod
    def _report(keyed: KeyedUrls, stored: int, version: str, where: str, older: str | None) -> None:
        rejected = ", ".join(f"{r}: {n}" for r, n in sorted(keyed.rejected.items()))
        print(
            f"\nRebuilt the seen filter at {where} under rules {version}: {keyed.urls} URLs "
            f"({stored} from the store, {keyed.urls - stored} from the frontier), "
            f"{len(keyed.keys)} keys, {sum(keyed.rejected.values())} rejected"
            + (f" ({rejected})" if rejected else "")
            + (f"; the old filter is kept read-only at {older}" if older else "")
        )
