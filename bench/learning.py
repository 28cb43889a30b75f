"""Parameter rules proven by content: duplicate fetches with learning against without.

Crawls the local site of :mod:`tests.learnsite` (``--pages`` articles and as many products;
links carry ``from=nav``, ``src=footer`` and ``view=print``, which no built-in list knows
and which change nothing, and ``lang=de``, which translates products and is ignored on
articles; every answer carries a random CSRF token and the time) with ``scrapy crawl site``,
counting what the server answered:

* ``off``: ``CANON_LEARN=off`` and no fingerprints: the anchor, the key as it was;
* ``fingerprints``: fingerprints on, learning off: what computing them costs the crawl;
* ``apply``: ``CANON_LEARN=apply``: rules learned and applied while the crawl runs;
* ``apply, next crawl``: a second crawl on the same store, starting with the rules the
  ``apply`` crawl learned (the ``propose`` flow after ``audit-rules --apply``).

Duplicate-fetch ratio = successful fetches per document (a path, plus ``lang`` on products;
1.00 is ideal); a merged meaningful variant would show as a missing document. Also prints the
fingerprint's CPU cost per KB on the site's pages. Re-checks use the default share.

    .venv/bin/python -m bench.learning [--pages 60] [--concurrency 16] [--docs DIR]

Last run (2 shared cores, loaded machine), ``--pages 60``: see bench/README.md.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bloom_frontier.content.fingerprint import fingerprint
from bloom_frontier.pipelines.reader import StoreReader
from tests.learnsite import LearnSite, duplicate_ratio

ROOT = Path(__file__).resolve().parent.parent


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def crawl(site: LearnSite, store: str, settings: list[str]) -> tuple[dict[str, int], float, float]:
    """(fetches per document, elapsed seconds, CPU seconds of the crawler) of one crawl."""
    with site.server() as server:
        args = [sys.executable, "-m", "scrapy.cmdline", "crawl", "site"]
        args += ["-a", f"start_url={server.url}/", "-s", f"STORE_URL={store}"]
        for setting in settings:
            args += ["-s", setting]
        started, cpu = time.perf_counter(), _children_cpu()
        result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)
        elapsed, cpu = time.perf_counter() - started, _children_cpu() - cpu
        if result.returncode:
            sys.exit(f"crawl failed: {result.stderr[-2000:]}")
        return site.documents(server.paths()), elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--docs",
        default="/usr/share/doc/python3.11/html",
        help="HTML tree to time fingerprints on ('' to skip): the messy-web site's source",
    )
    opts = parser.parse_args()
    site = LearnSite(pages=opts.pages)
    expected = 1 + 3 * opts.pages  # the index, articles, products in two languages
    common = [f"CONCURRENT_REQUESTS={opts.concurrency}"]
    runs = [
        ("off", ["CANON_LEARN=off", "CONTENT_FINGERPRINTS_ENABLED=False"], False),
        ("fingerprints", ["CANON_LEARN=off"], False),
        ("apply", ["CANON_LEARN=apply"], False),
        ("apply, next crawl", ["CANON_LEARN=propose"], True),
    ]
    print(f"site: {opts.pages} articles + {opts.pages} products, {expected} documents")
    print(
        f"{'run':<20} {'fetches':>8} {'documents':>10} {'dup ratio':>10} {'seconds':>8} "
        f"{'CPU s':>6} {'CPU ms/fetch':>12}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        figures = {}
        for name, settings, same_store in runs:
            store = f"sqlite:///{tmp}/{'apply' if same_store or name == 'apply' else name}.sqlite"
            documents, elapsed, cpu = crawl(site, store, common + settings)
            figures[name] = duplicate_ratio(documents)
            fetches = sum(documents.values())
            print(
                f"{name:<20} {fetches:>8} {len(documents):>10} {figures[name]:>10.2f} "
                f"{elapsed:>8.1f} {cpu:>6.1f} {cpu * 1e3 / fetches:>12.1f}"
            )
            if len(documents) != expected:
                print(f"  MISSING documents: {expected - len(documents)}")
        reader = StoreReader.from_url(f"sqlite:///{tmp}/apply.sqlite")
        rules = reader.param_rules()
        reader.close()
    print("learned rules: " + ", ".join(f"{rule.name} ({rule.state})" for rule in rules))
    print(
        f"duplicate-fetch ratio: {figures['off']:.2f} without learning, {figures['apply']:.2f} "
        f"learning during the crawl, {figures['apply, next crawl']:.2f} with the learned rules "
        f"from the start"
    )
    body = site.page("/articles/1?from=nav").body  # type: ignore[union-attr]
    fingerprint_cost("this site's page", [body.encode()] * 200)
    docs = sorted(Path(opts.docs).rglob("*.html")) if opts.docs else []
    if docs:  # the pages of the messy-web site (../shared/site) are built from these
        fingerprint_cost(opts.docs, [path.read_bytes() for path in docs])


def fingerprint_cost(what: str, bodies: list[bytes]) -> None:
    """Print the CPU time fingerprinting ``bodies`` takes (in the crawl: a worker thread)."""
    started = time.process_time()
    for body in bodies:
        fingerprint(body, body.decode("utf-8", "replace"))
    spent = time.process_time() - started
    kb = sum(map(len, bodies)) / 1024
    print(
        f"fingerprint, {what}: {len(bodies)} pages, {kb / len(bodies):.1f} KB each: "
        f"{spent * 1e3 / len(bodies):.2f} ms CPU per page, {spent * 1e3 / kb:.3f} ms/KB, "
        f"{spent:.1f} s in all"
    )


if __name__ == "__main__":
    main()
