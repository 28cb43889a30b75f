"""A shared crawl under Redis faults: pages lost, and whether a worker ever exits silently.

Each run starts its own redis-server with RedisBloom (no persistence, so a restart loses
everything, as a misconfigured production Redis does) and a generated local site
(:class:`tests.sitegen.LinkGraph`), starts two ``scrapy crawl site`` workers, and at a random
moment (after 5 to 60 % of the site) injects one fault, drawn at random:

- ``flushall``; ``restart`` (without persistence): the crawl's state is gone;
- ``wrong type <key>``: a fixed key overwritten with a value of another type, either one
  holding requests (``seen``, ``queue``, ``leases``...: the crawl's state is damaged) or
  politeness state or a count (``host_busy``, ``host_next``, ``queued``...: moved aside,
  the crawl goes on).

A worker's exit is **clear** when it exits 0 having the whole site, or non-zero with the one
line of a lost or damaged frontier; it is **silent** when it exits 0 while pages are
missing, or non-zero without saying why (target: 0 silent exits). **Pages lost** counts the
site's pages never fetched in runs that ended clear but incomplete (a reported loss: reset
and crawl again) and in runs with a silent exit (target 0 for the faults a worker heals).

    .venv/bin/python -m bench.chaos [--runs 12] [--site-pages 150] [--seed 3]

Figures of the last run are in ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bloom_frontier.frontier.redis.layout import VITAL_KEYS, FrontierKeys
from tests.servers import RedisServer
from tests.sitegen import LinkGraph, serve
from tests.test_crash import DELAY, Worker, fetches

#: Lines a worker that stopped on a lost or damaged frontier logs (once).
STOP_LINES = ("the frontier's state in Redis was lost", "the frontier's state in Redis was damaged")
#: Keys overwritten by the ``wrong type`` faults: some holding requests, some not.
WRONG_TYPE_KEYS = ("seen", "queue", "leases", "requests", "host_busy", "host_next", "queued")
KEYS = FrontierKeys.for_prefix("{site}")
#: Seconds a run may take.
RUN_TIMEOUT = 300


@dataclass
class Run:
    """One run's outcome."""

    fault: str
    codes: list[int]
    clear_stops: int
    missing: int
    seconds: float

    @property
    def silent(self) -> int:
        """Workers that exited 0 with pages missing, or non-zero without the line."""
        unexplained = sum(1 for code in self.codes if code != 0) - self.clear_stops
        return unexplained + (self.codes.count(0) if self.missing else 0)


def inject(fault: str, server: RedisServer) -> None:
    """Do ``fault`` to the crawl's Redis."""
    if fault == "restart":
        server.restart()
        return
    with server.client() as client:
        if fault == "flushall":
            client.flushall()
            return
        key = getattr(KEYS, fault.removeprefix("wrong type "))
        with client.pipeline(transaction=True) as pipe:  # no worker step comes between
            pipe.delete(key).sadd(key, "written over").execute()  # no fixed key is a set


def run_once(graph: LinkGraph, fault: str, rng: random.Random) -> Run:
    """Two workers crawl ``graph``; ``fault`` is injected at a random moment."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(bloom=True) as server,
        serve(graph, delay=DELAY) as site,
    ):
        workers = [Worker(name, site, server.url, Path(tmp)) for name in ("w1", "w2")]
        start = time.monotonic()
        for worker in workers:
            worker.start()
        deadline = start + RUN_TIMEOUT
        share = rng.uniform(0.05, 0.6) * len(graph.expected_paths())
        while len(fetches(site)) < share and time.monotonic() < deadline:
            time.sleep(0.02)
        inject(fault, server)
        codes = [worker.wait(deadline) for worker in workers]
        hits: Counter[str] = fetches(site)
        logs = [worker.log.read_text(errors="replace") for worker in workers]
    clear_stops = sum(
        1
        for code, log in zip(codes, logs, strict=True)
        if code != 0 and sum(log.count(line) for line in STOP_LINES) == 1
    )
    missing = len(graph.expected_paths() - set(hits))
    return Run(fault, codes, clear_stops, missing, time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--site-pages", type=int, default=150)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    graph = LinkGraph(args.site_pages)
    faults = ["flushall", "restart", *(f"wrong type {key}" for key in WRONG_TYPE_KEYS)]
    runs = []
    print(f"{args.runs} runs, 2 workers, {len(graph.expected_paths())} URLs ({DELAY}s per answer)")
    for _ in range(args.runs):
        run = run_once(graph, rng.choice(faults), rng)
        runs.append(run)
        print(
            f"  {run.fault:<22} exits {run.codes}  clear stops {run.clear_stops}  "
            f"pages missing {run.missing:>4}  silent exits {run.silent}  {run.seconds:5.1f} s"
        )
    healed = [run for run in runs if run.fault.removeprefix("wrong type ") not in VITAL_KEYS]
    healed = [run for run in healed if run.fault not in ("flushall", "restart")]
    print(f"silent exits: {sum(run.silent for run in runs)} (target 0)")
    print(
        f"pages lost where a worker heals the fault: {sum(run.missing for run in healed)} "
        f"in {len(healed)} runs (target 0); where the state was gone, reported: "
        f"{sum(run.missing for run in runs if run not in healed)}"
    )


if __name__ == "__main__":
    main()
