"""Dedupe key speed vs w3lib on two corpora, and time to first request vs plain Scrapy.

Two corpora built differently, every URL distinct (no whole-URL cache can help):

* ``generated``: ``bench/canon.py``'s corpus (originals plus equivalent variants: tracking
  parameters, order, host case, ports, dot-segments, escapes, IDN, provider share links);
* ``docs+vectors``: every distinct http(s) link of the Python docs (``python3.11-doc``, about
  25,000), as a crawler sees it: the ``href`` resolved against its page's URL on
  docs.python.org; plus as many URLs again in the shapes of ``../shared/vectors`` (their
  hosts, the hosts of ``whatwg_toascii.json``, the tracking names of
  ``tracking_params.json``, percent-escapes and query shapes of the w3lib / url-normalize /
  courlan cases) on the docs' paths. Each half is also timed alone.

For each corpus: µs per URL of :func:`dedupe_key` and ``w3lib.url.canonicalize_url`` (CPU time,
fastest of ``--rounds`` interleaved passes) and their ratio; target 4x on both corpora.

Time to first request: ``scrapy crawl site`` (embedded, and shared on a private RedisBloom)
and plain Scrapy's ``runspider`` of ``bench/anchor_scrapy.py``, each started ``--starts``
times against a local one-page server; the medians of the wall seconds and of the CPU seconds
the crawl's process used from its start to the first page request the server receives
(robots.txt not counted). CPU time is the figure to compare on a shared machine.

    .venv/bin/python -m bench.speed [--urls 120000] [--rounds 3] [--starts 5] [--skip-start]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin

from w3lib.url import canonicalize_url

from bench.canon import make_corpus, timed_keys
from bloom_frontier.canonical import dedupe_key

ROOT = Path(__file__).resolve().parent.parent
DOCS = Path("/usr/share/doc/python3.11/html")
#: ``../shared/vectors`` of the main checkout (``../../shared`` from a worktree under ``wt/``).
_VECTOR_DIRS = (ROOT.parent / "shared" / "vectors", ROOT.parent.parent / "shared" / "vectors")
VECTORS = next((path for path in _VECTOR_DIRS if path.is_dir()), _VECTOR_DIRS[0])
DOCS_ORIGIN = "https://docs.python.org/3.11/"
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGET_SPEEDUP = 4.0
_HREF = re.compile(r"""<a\s[^>]*?href=["']([^"']*)["']""", re.IGNORECASE)


def docs_links() -> list[str]:
    """Distinct http(s) links of the Python docs, resolved against their pages' URLs."""
    if not DOCS.is_dir():
        raise SystemExit(f"error: {DOCS} is missing: apt-get install -y python3.11-doc")
    links: dict[str, None] = {}
    for page in sorted(DOCS.rglob("*.html")):
        base = DOCS_ORIGIN + page.relative_to(DOCS).as_posix()
        for href in _HREF.findall(page.read_text("utf-8", "replace")):
            url = urljoin(base, href.replace("&amp;", "&"))
            if url.startswith(("http://", "https://")):
                links[url] = None
    return list(links)


def _vector_inputs(name: str) -> list[str]:
    cases = json.loads((VECTORS / name).read_text("utf-8"))
    return [case["input"] for case in cases if isinstance(case, dict) and "input" in case]


def vector_shapes() -> tuple[list[str], list[str], list[str]]:
    """(hosts, query parameters, path escapes) seen in the shared vectors."""
    if not VECTORS.is_dir():
        raise SystemExit(f"error: {VECTORS} is missing (the shared URL test vectors)")
    urls = [
        url
        for name in ("w3lib_canonicalize.json", "url_normalize.json", "courlan.json")
        for url in _vector_inputs(name)
        if url.startswith(("http://", "https://")) and url.isprintable()
    ]
    hosts = {url.split("/")[2].rpartition("@")[2] for url in urls if "[" not in url}
    for case in json.loads((VECTORS / "whatwg_toascii.json").read_text("utf-8")):
        if isinstance(case, dict) and case.get("output") and "." in case["input"]:
            hosts.add(case["input"])  # a host WHATWG turns into ASCII: IDNA, case, dots
    params = {p for url in urls for p in url.partition("?")[2].partition("#")[0].split("&") if p}
    tracking = json.loads((VECTORS / "tracking_params.json").read_text("utf-8"))
    names = re.findall(r"['\"]([a-z_]{2,20})['\"]", json.dumps(tracking.get("brave_query_filter")))
    params.update(f"{name}=x{index}" for index, name in enumerate(sorted(set(names))))
    escapes = sorted(set(re.findall(r"%[0-9A-Fa-f]{2}", " ".join(urls)))) or ["%20"]
    return sorted(hosts), sorted(params), escapes


def vector_shaped(links: Sequence[str], size: int, seed: int) -> list[str]:
    """``size`` distinct URLs in the vectors' shapes on the paths of ``links``: a host of the
    vectors (a third of them WHATWG's IDNA cases, some invalid), a path with an escape one
    time in five, 0-2 content parameters and 0-2 of the vectors' (tracking names included)."""
    rng = random.Random(seed)
    hosts, params, escapes = vector_shapes()
    paths = [[*link.split("/", 3), ""][3].partition("#")[0].partition("?")[0] for link in links]
    words = ("page", "id", "q", "sort", "lang", "v", "ref", "start")
    corpus: dict[str, None] = {}
    while len(corpus) < size:
        path = rng.choice(paths)
        if path and rng.random() < 0.2:
            cut = rng.randrange(len(path))
            path = path[:cut] + rng.choice(escapes) + path[cut:]
        query = [f"{rng.choice(words)}={rng.randrange(10**4)}" for _ in range(rng.randrange(3))]
        query += rng.sample(params, rng.randrange(3))
        rng.shuffle(query)
        scheme = rng.choice(("http", "https", "https"))
        url = f"{scheme}://{rng.choice(hosts)}/{path}" + (f"?{'&'.join(query)}" if query else "")
        corpus[url + (f"#{rng.choice(words)}" if rng.random() < 0.1 else "")] = None
    return list(corpus)


def key_speed(name: str, urls: Sequence[str], rounds: int) -> float:
    """Print µs/URL of both methods on ``urls``; return the speed ratio."""
    methods: dict[str, Callable[[str], object]] = {
        "dedupe_key": dedupe_key,
        "w3lib canonicalize_url": canonicalize_url,
    }
    best = dict.fromkeys(methods, float("inf"))
    for _ in range(rounds):  # interleaved: drift on the machine hits both
        for method, function in methods.items():
            best[method] = min(best[method], timed_keys(function, urls)[0])
    micros = {method: seconds / len(urls) * 1e6 for method, seconds in best.items()}
    ratio = micros["w3lib canonicalize_url"] / micros["dedupe_key"]
    print(
        f"{name:16} {len(urls):7} URLs  dedupe_key {micros['dedupe_key']:5.2f} µs  "
        f"canonicalize_url {micros['w3lib canonicalize_url']:5.2f} µs  {ratio:5.2f}x"
    )
    return ratio


class _FirstRequest(BaseHTTPRequestHandler):
    """One page without links; the server notes when each page request arrives."""

    def do_GET(self) -> None:
        if self.path != "/robots.txt":
            pid = self.server.crawler_pid  # type: ignore[attr-defined]
            self.server.arrivals.append((time.monotonic(), cpu_seconds(pid)))  # type: ignore[attr-defined]
        body = b"<html><body>one page</body></html>"
        self.send_response(200 if self.path != "/robots.txt" else 404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def first_request(
    command: list[str], cwd: Path, server: ThreadingHTTPServer
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the crawl's process) from starting ``command`` to the
    first page request ``server`` receives. CPU time is the steadier figure on a loaded
    machine: waiting for a core does not count."""
    server.arrivals.clear()  # type: ignore[attr-defined]
    started = time.monotonic()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=errors)
        server.crawler_pid = process.pid  # type: ignore[attr-defined]
        returncode = process.wait(timeout=120)
        errors.seek(0)
        tail = errors.read().decode("utf-8", "replace").strip().splitlines()[-1:]
    arrivals = server.arrivals  # type: ignore[attr-defined]
    if returncode != 0 or not arrivals:
        raise SystemExit(f"error: {command[3]} run failed ({returncode}): {tail}")
    arrived, cpu = arrivals[0]
    return arrived - started, cpu


def start_up(starts: int) -> None:
    """Print the median time to first request of each mode, and their ratios to plain."""
    from tests.servers import RedisServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), _FirstRequest)
    server.arrivals = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    scrapy = [sys.executable, "-m", "scrapy.cmdline"]
    once = ["-s", "CLOSESPIDER_PAGECOUNT=1", "-s", "LOG_LEVEL=INFO"]
    with tempfile.TemporaryDirectory() as work, RedisServer(bloom=True) as redis:
        store = ["-s", f"STORE_URL=sqlite:///{work}/first.sqlite"]
        site = [*scrapy, "crawl", "site", "-a", f"start_url={url}", *once, *store]
        modes = {
            "plain Scrapy": ([*scrapy, "runspider", str(ROOT / "bench" / "anchor_scrapy.py"),
                              "-a", f"start_url={url}", *once], Path(work)),
            "site embedded": (site, ROOT),
            "site shared": ([*site, "-s", f"REDIS_URL={redis.url}"], ROOT),
        }  # fmt: skip
        runs: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
        for _ in range(starts):
            for mode, (command, cwd) in modes.items():
                with redis.client() as client:
                    client.flushall()  # each shared start is a new crawl, not a finished one
                runs[mode].append(first_request(command, cwd, server))
    server.shutdown()
    plain_wall, plain_cpu = (statistics.median(x) for x in zip(*runs["plain Scrapy"], strict=True))
    for mode, times in runs.items():
        wall, cpu = (statistics.median(x) for x in zip(*times, strict=True))
        print(
            f"{mode:14} first request after {wall:5.2f} s wall, {cpu:5.2f} CPU-s "
            f"(medians of {len(times)})  {cpu / plain_cpu:4.2f}x plain's CPU, "
            f"{wall / plain_wall:4.2f}x its wall"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=120_000, help="URLs of the generated corpus")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="timed passes; the fastest counts")
    parser.add_argument("--starts", type=int, default=5, help="crawls started per mode")
    parser.add_argument("--skip-start", action="store_true", help="key speed only")
    args = parser.parse_args(argv)

    print(f"dedupe key vs w3lib canonicalize_url (Python {sys.version.split()[0]}):")
    links = docs_links()
    shaped = vector_shaped(links, len(links), args.seed)
    corpora = {
        "generated": [link.url for link in make_corpus(args.urls, 0.3, args.seed)],
        "docs+vectors": links + shaped,  # the second corpus: its two halves below
    }
    ratios = {name: key_speed(name, urls, args.rounds) for name, urls in corpora.items()}
    for name, urls in (("  docs links", links), ("  vector shapes", shaped)):
        key_speed(name, urls, args.rounds)
    if not args.skip_start:
        print("\ntime to first request:")
        start_up(args.starts)
    missed = [name for name, ratio in ratios.items() if ratio < TARGET_SPEEDUP]
    print(f"\n[{'MISS' if missed else 'PASS'}] dedupe_key >= {TARGET_SPEEDUP}x on both corpora")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
