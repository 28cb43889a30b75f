"""Load a crawl's redirect maps into Debian's nginx and Apache and request every source.

    python -m bench.redirect_maps STORE_URL [--truth OUTDIR/truth.json]

For the default map and ``--permanent-only``: every entry must answer one redirect straight
to its target with its status, every source that is not an entry must not be redirected.
With the messy site's ``truth.json`` (``bench/site.sh`` leaves it in its OUTDIR), each entry's
target is also compared with the document the injected chain really ends on. Prints the
figures as JSON on its last line.

Last run (messy site seed 1, ``bench/site.sh 1 embedded``, scorer: hop precision/recall 1.0,
chain resolution 307/307): 463 sources, 421 entries; nginx and Apache each redirected 421/421
entries straight to their target with their status and left the 42 other sources alone
(loops 10, blocked 9, too-many-hops 20, soft-404 flagged 3); ``--permanent-only``: 76/76
entries, 387 others left alone; truth: 421/421 entries have the document and status of the
injected chain.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from tests.redirect_server import ROOT, SCRAPY
from tests.webservers import ApacheServer, NginxServer, _WebServer


def export(store_url: str, fmt: str, *options: str) -> str:
    command = [*SCRAPY, "redirects", "-s", f"STORE_URL={store_url}", "--format", fmt, *options]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"scrapy redirects --format {fmt} failed: {result.stderr[-2000:]}")
    return result.stdout


def request_target(url: str) -> tuple[str, str]:
    """(Host header, request target) of ``url``."""
    parts = urlsplit(url)
    return parts.netloc, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def check(server: _WebServer, text: str, rows: list[dict]) -> Counter[str]:
    """Load ``text`` into ``server``; count entries redirected right and wrong, and other
    sources left alone or wrongly redirected."""
    server.load(text)
    counts: Counter[str] = Counter()
    for row in rows:
        host, target = request_target(row["source"])
        response = server.get(target, host)
        got = (response.status, response.getheader("Location"))
        if row["entry"]:
            counts["entry-ok" if got == (row["status"], row["target"]) else "entry-wrong"] += 1
        else:
            counts["other-ok" if response.status == 404 else "other-redirected"] += 1
    return counts


def truth_agreement(rows: list[dict], truth_path: Path) -> Counter[str]:
    """Entries whose target path and status are those of the injected chain through their
    source: the document it really ends on, permanent only if every hop from there is."""
    truth = json.loads(truth_path.read_text())
    want_by_source: dict[str, tuple[str, int]] = {}
    for chain in truth["redirects"]:
        if chain.get("outcome") != "document":
            continue
        for index, hop in enumerate(chain["hops"]):
            rest = [later["status"] for later in chain["hops"][index:]]
            permanent = all(status in (301, 308) for status in rest)
            keeps_method = all(status in (307, 308) for status in rest)
            status = (308 if keeps_method else 301) if permanent else (307 if keeps_method else 302)
            want_by_source[urlsplit(hop["from"]).path] = ("/" + chain["final_doc"], status)
    counts: Counter[str] = Counter()
    for row in rows:
        want = want_by_source.get(urlsplit(row["source"]).path)
        if row["entry"] and want is not None:
            got = (urlsplit(row["target"]).path, row["status"])
            counts["truth-agrees" if got == want else "truth-differs"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store_url")
    parser.add_argument("--truth", type=Path)
    options = parser.parse_args()
    figures: dict[str, object] = {}
    with NginxServer() as nginx, ApacheServer() as apache:
        for label, extra in (("all", ()), ("permanent-only", ("--permanent-only",))):
            rows = [json.loads(line) for line in export(options.store_url, "jsonl").splitlines()]
            chosen = [
                json.loads(line) for line in export(options.store_url, "jsonl", *extra).splitlines()
            ]
            kept = {row["source"] for row in chosen}
            # A source --permanent-only leaves out must not be redirected either.
            expected = chosen + [
                {**row, "entry": False} for row in rows if row["source"] not in kept
            ]
            for name, server in (("nginx", nginx), ("apache", apache)):
                text = export(options.store_url, name, *extra)
                figures[f"{name}/{label}"] = dict(check(server, text, expected))
            figures[f"entries/{label}"] = sum(row["entry"] for row in chosen)
        figures["sources"] = len(rows)
        figures["outcomes"] = dict(Counter(row["outcome"] for row in rows))
        figures["skips"] = dict(Counter(row["skip"] for row in rows if row["skip"]))
    if options.truth:
        figures["truth"] = dict(truth_agreement(rows, options.truth))
    print(json.dumps(figures), file=sys.stdout)


if __name__ == "__main__":
    main()
