"""How long a worker's Twisted loop stalls while Redis or the record store hangs, measured.

Runs ``scrapy crawl site`` through a shared frontier (its own redis-server with RedisBloom,
a generated site of ``--pages`` pages, a SQLite store) with
:class:`bloom_frontier.loopwatch.LoopStallMeter` installed (a 20 ms repeating timer; the longest
delay past its due time is the loop's longest stall), three times:

1. **anchor**: undisturbed, the stall floor of the machine in this run;
2. **Redis paused**: redis-server SIGSTOPped for ``--hang`` seconds mid-crawl;
3. **store locked**: the SQLite store held under ``BEGIN EXCLUSIVE`` by another process for
   ``--hang`` seconds mid-crawl.

Prints, per run, the longest stall, the pages the site served during the hang, whether
every page was fetched and the crawl's wall time, and the **machine's floor** measured in
the same moment: the longest stall of an idle Twisted loop with the same timer, run beside
the crawl (on a machine shared with other work, the OS alone delays a loop that much).
Target: every longest stall under 200 ms (before this measurement existed, one lease call
blocked the loop 30.2 s with Redis paused); exits 1 if one is missed or a crawl lost a page.

    .venv/bin/python -m bench.loop_stall [--pages 120] [--hang 5]

Last run (2 cores, load average 3-4 from other work on the machine): longest stall anchor
87 ms, Redis paused 5 s 80 ms, store locked 5 s 49 ms, against an idle loop's 5-16 ms beside
them; every page fetched in all three. (An earlier run at load average ~20 missed the target
in all three alike, undisturbed included: a busy crawl process waits for a CPU that long.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.stalls import crawl_with_hang, lock_store, pause_redis

TARGET_MS = 200
#: An idle Twisted loop with the meter's 20 ms timer, for ``argv[1]`` seconds: prints its
#: longest stall in ms.
IDLE_LOOP = """
import sys, time
from twisted.internet import reactor, task
worst, due = [0.0], [time.monotonic() + 0.02]
def tick():
    now = time.monotonic()
    worst[0], due[0] = max(worst[0], now - due[0]), now + 0.02
task.LoopingCall(tick).start(0.02, now=False)
reactor.callLater(float(sys.argv[1]), reactor.stop)
reactor.run()
print(round(worst[0] * 1000))
"""


def idle_loop(seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", IDLE_LOOP, str(seconds)], stdout=subprocess.PIPE, text=True
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=120)
    parser.add_argument("--hang", type=float, default=5.0)
    args = parser.parse_args()
    ok = True
    print(
        f"{'run':<14}{'longest stall':>15}{'machine floor':>15}{'served in hang':>16}"
        f"{'all pages':>11}{'wall':>8}"
    )
    runs = (("anchor", None), ("redis paused", pause_redis), ("store locked", lock_store))
    for name, hang in runs:
        with tempfile.TemporaryDirectory() as tmp:
            floor = idle_loop(20.0)
            started = time.monotonic()
            crawl = crawl_with_hang(Path(tmp), hang, pages=args.pages, hang_seconds=args.hang)
            wall = time.monotonic() - started
            floor_ms = int(floor.communicate(timeout=60)[0].strip() or -1)
        fine = (
            crawl.returncode == 0
            and crawl.every_page_fetched
            and 0 <= crawl.longest_stall_ms < TARGET_MS
        )
        ok &= fine
        print(
            f"{name:<14}{crawl.longest_stall_ms:>12} ms{floor_ms:>12} ms"
            f"{crawl.served_during_hang:>16}{'yes' if crawl.every_page_fetched else 'NO':>11}"
            f"{wall:>7.1f}s" + ("" if fine else "  <- missed")
        )
    print(f"target: longest stall < {TARGET_MS} ms in every run")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
