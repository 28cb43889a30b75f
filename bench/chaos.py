"""Chaos runs of a shared crawl: faults injected at random moments, pages lost counted.

Each run crawls a generated local site (``tests/sitegen.py``: ``--pages`` pages ``/p/<i>``, all
reachable from ``/p/0``, plus 404s and redirects) with two ``scrapy crawl site`` workers
sharing a frontier in a private RedisBloom ``redis-server`` (AOF on, ``appendfsync always``,
except for the ``redis-wiped`` fault) and one record store (a SQLite file both write to, or a
fresh schema of the local PostgreSQL with ``--store postgresql``). At a seeded random moment
(when a random share, 20-60%, of the site has been fetched) it injects one fault, then waits
for the workers to exit, restarting a worker it stopped itself. See ``docs/chaos.md``.

    .venv/bin/python -m bench.chaos [--runs 1] [--seed 1] [--faults kill9,flushall]
                                   [--pages 300] [--store sqlite|postgresql] [--keep]

Per run and fault it prints the pages expected, stored once (one row in the store's
``pages`` table, by the URL the response ended on), lost (no row), stored twice (rows beyond
one), fetched twice (answers beyond one, from the site's log), and each worker process's exit
code and last log line. Verdicts: ``OK`` (nothing lost, every worker exited 0), ``stopped
loudly`` (a fault that may stop the crawl did, with a non-zero exit and an ``error:`` / ERROR
line: OK), ``SILENT LOSS`` (pages lost and a worker exited 0 or said "finished"), ``LOST``
(pages lost, no worker claimed success), ``DIED`` (a non-zero exit without an error line),
``HUNG`` (a worker alive but nothing fetched for ``STALL`` seconds, or one still running
``SIGTERM_GRACE`` seconds after its second SIGTERM: the harness kills it).
Exit status 1 if any run ended ``SILENT LOSS`` or ``HUNG``, else 0.

The site is the generated one because the messy-web site of ``../shared/site`` needs
Debian's ``python3.11-doc`` (missing here) and a crawl of its 527 documents takes minutes;
one run of every fault here takes about two.

Figures of the last runs on main, and what the workers said: ``docs/chaos.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from bloom_frontier.frontier.redis.layout import FrontierKeys
from tests.httpserver import Page, TestServer, html, redirect
from tests.servers import RedisServer
from tests.sitegen import LinkGraph

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]
PREFIX = "{site}"
#: Seconds the site takes per answer, so that a crawl lasts long enough to be disturbed.
DELAY = 0.1
LEASE_TTL = 2.0
#: Seconds with no page fetched while a worker is alive after which a run counts as hung.
STALL = 15.0
#: Seconds a run may last at most (start-up included).
RUN_TIMEOUT = 120.0
#: Seconds a worker has to exit after its second SIGTERM.
SIGTERM_GRACE = 5.0
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
#: Bytes that are not UTF-8, as the one ``Location`` header of the poisoned redirects (sent
#: latin-1 encoded by http.server, i.e. as these raw bytes).
POISON = "\xff\xfe\xc3("
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[[^]]+\] (\w+):")
SUMMARY = "INFO: Crawl summary"
#: Verdicts that make the exit status 1: nobody would notice them in time.
FAILING = ("SILENT LOSS", "HUNG")


def is_error(line: str) -> bool:
    """A line that says something went wrong: ``error:``, or a record at ERROR or above."""
    found = LOG_RECORD.match(line)
    return line.startswith("error:") or (
        found is not None and found.group(1) in ("ERROR", "CRITICAL")
    )


class ChaosSite(TestServer):
    """The generated site, served with its request log; once :attr:`poisoned`, every page
    it serves also links to ``/bad/<i>``, a 301 whose ``Location`` holds invalid UTF-8."""

    def __init__(self, graph: LinkGraph) -> None:
        super().__init__({"/*": self.answer}, delay=DELAY)
        self.graph = graph
        self.poisoned = False

    def answer(self, path: str) -> Page | None:
        kind, _, number = path.partition("?")[0].strip("/").partition("/")
        if kind == "bad" and number.isdigit():
            return redirect(f"/bad/{number}/{POISON}")  # its target: a 404
        if kind == "p" and self.poisoned and number.isdigit() and int(number) < self.graph.pages:
            return html(*self.graph.links(int(number)), f"/bad/{number}", title=number)
        return self.graph.page(path)

    def fetches(self) -> Counter[str]:
        """Answers per page ``/p/<i>`` (a tracked spelling counts for its page)."""
        paths = (path.partition("?")[0] for path in self.paths())
        return Counter(path for path in paths if path.startswith("/p/"))


@dataclass
class Life:
    """One process of a worker: how it ended and what it said last."""

    rc: int | None = None
    #: Why it ended: "exited" (by itself), "terminated" (exited after the harness's SIGTERMs),
    #: "killed" / "stopped" (SIGKILLed by the harness: a fault, or giving up on it).
    end: str = "running"
    last_line: str = ""
    finish_reason: str = ""
    errors: int = 0
    last_error: str = ""
    note: str = ""
    ignored_sigterm: bool = False

    @property
    def claims_success(self) -> bool:
        return self.end == "exited" and (self.rc == 0 or self.finish_reason == "finished")

    @property
    def loud(self) -> bool:
        """A non-zero exit with a line that says what went wrong."""
        return self.end == "exited" and self.rc != 0 and self.errors > 0

    def describe(self) -> str:
        code = "hung" if self.rc is None else str(self.rc)
        text = f"rc {code} ({self.end}{', ' + self.note if self.note else ''})"
        said = f"{text}: {self.last_line[:110]}"
        if self.last_error and self.last_error != self.last_line:
            said += f"\n      last error: {self.last_error[:110]}"
        return said


class Worker:
    """A ``scrapy crawl site`` process of the shared crawl, restartable, logging to a file
    (one section per process)."""

    def __init__(self, name: str, command: list[str], log: Path) -> None:
        self.name = name
        self.command = command
        self.log = log
        self.lives: list[Life] = []
        self.process: subprocess.Popen[bytes] | None = None
        self._offset = 0

    def start(self) -> None:
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.lives.append(Life())

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def poll(self) -> bool:
        """True once the current process has exited (recorded as exited by itself)."""
        if self.process is None:
            return True
        if self.process.poll() is None:
            return False
        if self.lives[-1].end == "running":
            self._record("exited")
        return True

    def signal(self, signum: int) -> None:
        if self.alive:
            assert self.process is not None
            os.kill(self.process.pid, signum)

    def kill(self, end: str = "killed") -> None:
        """SIGKILL the current process (a crash, or the harness giving up on it)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.lives[-1].end == "running":
            self._record(end)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the current process to exit; True if it did."""
        assert self.process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout)
        return self.poll()

    def _record(self, end: str) -> None:
        assert self.process is not None
        life = self.lives[-1]
        life.rc, life.end = self.process.returncode, end
        with self.log.open("rb") as log:
            log.seek(self._offset)
            text = log.read().decode(errors="replace")
        lines = [line.rstrip() for line in text.splitlines() if line.strip()]
        summary = next((i for i, line in enumerate(lines) if line.endswith(SUMMARY)), len(lines))
        for line in lines[summary:]:
            if line.strip().startswith("finish reason:"):
                life.finish_reason = line.split(":", 1)[1].strip()
        # Log records, `error:` lines and an exception's last line; not Scrapy's stats dump.
        said = [line for line in lines[:summary] if not line.startswith((" ", "{", "\t"))]
        life.last_line = said[-1] if said else "(no output)"
        errors = [line for line in said if is_error(line)]
        life.errors = len(errors)
        life.last_error = errors[-1] if errors else ""


@dataclass(frozen=True)
class Fault:
    """A fault the harness injects once per run."""

    name: str
    what: str
    #: Whether stopping the crawl loudly (non-zero exit, a clear line) is a right answer.
    may_stop: bool
    inject: Callable[[Chaos], str]
    #: Whether the run's Redis keeps an append-only file.
    appendonly: bool = True
    needs_sqlite: bool = False


@dataclass
class Result:
    fault: str
    run: int
    injected: str
    expected: int
    #: Pages with exactly one row in the store.
    stored_once: int
    #: Pages with no row.
    lost: int
    #: Rows beyond the first of a page.
    stored_twice: int
    #: Answers beyond the first of a page, from the site's side.
    fetched_twice: int
    seconds: float
    workers: dict[str, list[Life]] = field(default_factory=dict)
    verdict: str = ""

    @property
    def silent_exits(self) -> int:
        """Worker processes that exited 0 or said "finished" while pages were lost."""
        lives = (life for lives in self.workers.values() for life in lives)
        return sum(life.claims_success for life in lives) if self.lost else 0


class Chaos:
    """One run: the site, Redis, the store and two workers, with one fault injected."""

    def __init__(
        self, fault: Fault, rng: random.Random, pages: int, store: str, workdir: Path
    ) -> None:
        self.fault = fault
        self.rng = rng
        self.graph = LinkGraph(pages)
        self.store = store
        self.workdir = workdir
        self.sqlite_path = workdir / "store.sqlite"
        self.schema = ""
        self.site = ChaosSite(self.graph)
        self.redis = RedisServer(bloom=True, appendonly=fault.appendonly)
        self.workers: list[Worker] = []

    @contextlib.contextmanager
    def services(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.site)
            stack.enter_context(self.redis)
            stack.callback(self._drop_schema)
            stack.callback(self._kill_workers)
            yield

    def store_url(self) -> str:
        if self.store == "sqlite":
            return f"sqlite:///{self.sqlite_path}"
        self.schema = f"chaos_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(PG_DSN, autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{self.schema}"')
        return f"{PG_URL}?options=-csearch_path%3D{self.schema}"

    def _drop_schema(self) -> None:
        if self.schema:
            with psycopg.connect(PG_DSN, autocommit=True) as connection:
                connection.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')

    def _kill_workers(self) -> None:
        for worker in self.workers:
            worker.kill("stopped")

    def run(self, number: int) -> Result:
        started = time.monotonic()
        with self.services():
            command = [
                *SCRAPY, "crawl", "site",
                "-a", f"start_url={self.site.url}/p/0",
                "-s", f"REDIS_URL={self.redis.url}",
                "-s", f"STORE_URL={self.store_url()}",
                "-s", f"FRONTIER_LEASE_TTL={LEASE_TTL}",
                "-s", "FRONTIER_LEASE_BATCH=4",
                "-s", "CONCURRENT_REQUESTS=4",
                "-s", "LOG_LEVEL=INFO",
                "-s", "LOGSTATS_INTERVAL=5",
            ]  # fmt: skip
            self.workers = [
                Worker(name, command, self.workdir / f"{name}.log") for name in ("w1", "w2")
            ]
            for worker in self.workers:
                worker.start()
            injected = self._inject_at_random_moment(started)
            hung = self._wait_for_workers(started)
            stored = self._stored_pages()
            fetches = self.site.fetches()
        expected = [f"/p/{i}" for i in range(self.graph.pages)]
        result = Result(
            fault=self.fault.name,
            run=number,
            injected=injected,
            expected=len(expected),
            stored_once=sum(stored[page] == 1 for page in expected),
            lost=sum(stored[page] == 0 for page in expected),
            stored_twice=sum(max(0, stored[page] - 1) for page in expected),
            fetched_twice=sum(count - 1 for count in fetches.values()),
            seconds=time.monotonic() - started,
            workers={worker.name: worker.lives for worker in self.workers},
        )
        result.verdict = self._verdict(result, hung)
        return result

    def _progress(self) -> float:
        return len(self.site.fetches()) / self.graph.pages

    def _inject_at_random_moment(self, started: float) -> str:
        share = self.rng.uniform(0.2, 0.6)
        while self._progress() < share:
            if all(worker.poll() for worker in self.workers):
                return f"not injected: the crawl ended before {share:.0%} of the site"
            if time.monotonic() - started > RUN_TIMEOUT:
                return f"not injected: {share:.0%} of the site not reached in {RUN_TIMEOUT:.0f} s"
            time.sleep(0.02)
        return f"at {self._progress():.0%} of the site: {self.fault.inject(self)}"

    def _wait_for_workers(self, started: float) -> bool:
        """Wait until every worker has exited; True if the harness had to kill them."""
        last_count, last_change = -1, time.monotonic()
        while not all(worker.poll() for worker in self.workers):
            count = sum(self.site.fetches().values())
            now = time.monotonic()
            if count != last_count:
                last_count, last_change = count, now
            if now - last_change > STALL or now - started > RUN_TIMEOUT:
                for worker in self.workers:
                    if worker.alive:
                        worker.kill("stopped")
                        worker.lives[-1].rc, worker.lives[-1].note = None, "killed by the harness"
                return True
            time.sleep(0.1)
        return False

    def _stored_pages(self) -> Counter[str]:
        """Rows of the store's ``pages`` table per page path (of the page a response ended
        on: a redirect's row counts for its target)."""
        query = "SELECT final_url FROM pages WHERE status = 200"
        rows: list[tuple[str]] = []
        if self.store == "sqlite":
            if not self.sqlite_path.exists():
                return Counter()
            read_only = f"file:{self.sqlite_path}?mode=ro"
            with (
                contextlib.closing(sqlite3.connect(read_only, uri=True)) as db,
                contextlib.suppress(sqlite3.OperationalError),  # no table: nothing stored
            ):
                rows = db.execute(query).fetchall()
        else:
            with psycopg.connect(PG_DSN) as connection:
                connection.execute(f'SET search_path TO "{self.schema}"')
                with contextlib.suppress(psycopg.errors.UndefinedTable):
                    rows = connection.execute(query).fetchall()
        return Counter(urlsplit(url).path for (url,) in rows)

    def _verdict(self, result: Result, hung: bool) -> str:
        lives = [life for lives in result.workers.values() for life in lives]
        ended = [life for life in lives if life.end == "exited"]
        if hung:
            return "HUNG"
        if any(life.ignored_sigterm for life in lives):
            return "HUNG (ignored 2 SIGTERMs)"
        if any(life.rc != 0 for life in ended):
            if any(not life.loud for life in ended if life.rc != 0):
                return "DIED"
            if self.fault.may_stop:
                return "stopped loudly"
            return "LOST (loud)" if result.lost else "FAILED (loud)"
        if result.lost:
            return "SILENT LOSS" if any(life.claims_success for life in ended) else "LOST"
        return "not injected" if result.injected.startswith("not injected") else "OK"

    # The faults (each returns what it did, for the report).

    def victim(self) -> Worker:
        return self.rng.choice(self.workers)

    def kill9(self) -> str:
        worker = self.victim()
        worker.kill()
        worker.start()
        return f"SIGKILLed {worker.name}, restarted it"

    def sigterm_twice(self) -> str:
        worker = self.victim()
        worker.signal(signal.SIGTERM)
        time.sleep(0.5)
        worker.signal(signal.SIGTERM)
        sent = time.monotonic()
        if worker.wait(SIGTERM_GRACE):
            worker.lives[-1].end = "terminated"  # exited as told: claims nothing of the crawl
            what = f"{worker.name} exited {time.monotonic() - sent:.1f} s after the second"
        else:
            worker.kill("stopped")
            worker.lives[-1].note = f"still running {SIGTERM_GRACE:.0f} s after 2 SIGTERMs"
            worker.lives[-1].ignored_sigterm = True
            what = f"{worker.name} ignored them for {SIGTERM_GRACE:.0f} s: SIGKILLed"
        worker.start()
        return f"2 SIGTERMs 0.5 s apart: {what}; restarted it"

    def redis_restart(self) -> str:
        self.redis.kill()
        down = self.rng.uniform(0.5, 2.0)
        time.sleep(down)
        self.redis.start()
        how = "from its AOF" if self.fault.appendonly else "without an AOF: empty"
        return f"redis-server SIGKILLed, restarted {down:.1f} s later {how}"

    def flushall(self) -> str:
        with self.redis.client() as client:
            client.flushall()
        return "FLUSHALL"

    def evict(self) -> str:
        with self.redis.client() as client:
            keys, memory = client.dbsize(), client.info("memory")
            limit = int(memory["used_memory"]) - int(memory["used_memory_dataset"]) // 2
            client.config_set("maxmemory-policy", "allkeys-lru")
            client.config_set("maxmemory", limit)
            left = client.dbsize()  # the command after CONFIG SET evicts down to the limit
        return f"allkeys-lru, maxmemory {limit:,} B: {keys - left} of {keys} keys evicted at once"

    def wrong_type(self, key: str) -> str:
        with self.redis.client() as client:
            kind = client.type(f"{PREFIX}:{key}").decode()
            client.delete(f"{PREFIX}:{key}")
            client.set(f"{PREFIX}:{key}", "chaos")
        return f"{PREFIX}:{key} ({kind}) replaced by a string"

    def poison(self) -> str:
        self.site.poisoned = True
        return "pages now link to /bad/<i>: 301, Location with invalid UTF-8"

    def delete_store(self) -> str:
        removed = [
            path.name
            for suffix in ("", "-wal", "-shm", "-journal")
            if (path := Path(f"{self.sqlite_path}{suffix}")).exists()
        ]
        for name in removed:
            (self.workdir / name).unlink()
        return f"deleted {', '.join(removed)}"


def string_fault(key: str) -> Fault:
    """``string:<key>``: the fixed key ``<prefix>:<key>`` (a field of ``FrontierKeys``)
    replaced by a string."""
    return Fault(
        f"string:{key}", f"{PREFIX}:{key} set as a string", True, lambda c: c.wrong_type(key)
    )


def fault_named(name: str) -> Fault | None:
    """The fault of that name: one of :data:`FAULTS`, or ``string:`` and any fixed key."""
    kind, _, key = name.partition(":")
    if kind == "string" and key in FrontierKeys.names():
        return string_fault(key)
    return FAULTS.get(name)


FAULTS = {
    fault.name: fault
    for fault in (
        Fault("none", "no fault: the anchor", False, lambda chaos: "nothing"),
        Fault("kill9", "SIGKILL one worker, start it again", False, Chaos.kill9),
        Fault("sigterm2", "SIGTERM one worker twice, 0.5 s apart", False, Chaos.sigterm_twice),
        Fault("redis-aof", "SIGKILL redis-server, restart it from its AOF", False,
              Chaos.redis_restart),
        Fault("redis-wiped", "SIGKILL redis-server without AOF, restart it (empty)", True,
              Chaos.redis_restart, appendonly=False),
        Fault("flushall", "FLUSHALL", True, Chaos.flushall),
        Fault("evict", "maxmemory-policy allkeys-lru and a maxmemory below the data", True,
              Chaos.evict),
        string_fault("host_busy"),
        string_fault("seen"),
        Fault("poison-location", "a redirect whose Location holds invalid UTF-8", False,
              Chaos.poison),
        Fault("store-deleted", "the SQLite store file deleted", True, Chaos.delete_store,
              needs_sqlite=True),
    )
}  # fmt: skip


def report(result: Result) -> None:
    print(
        f"run {result.run} {result.fault}: {result.verdict}  ({result.injected})\n"
        f"  pages expected {result.expected}, stored once {result.stored_once}, "
        f"lost {result.lost}, stored twice {result.stored_twice}, "
        f"fetched twice {result.fetched_twice}, {result.seconds:.0f} s"
    )
    for name, lives in result.workers.items():
        for life in lives:
            print(f"  {name}: {life.describe()}")
    sys.stdout.flush()


def table(results: list[Result]) -> None:
    print(f"\n{'run':>3} {'fault':<20} {'expected':>8} {'once':>5} {'lost':>5} {'dup rows':>8} "
          f"{'refetched':>9}  {'exit codes':<14} verdict")  # fmt: skip
    for r in results:
        codes = ",".join(
            "/".join("hung" if life.rc is None else str(life.rc) for life in lives)
            for lives in r.workers.values()
        )
        print(f"{r.run:>3} {r.fault:<20} {r.expected:>8} {r.stored_once:>5} {r.lost:>5} "
              f"{r.stored_twice:>8} {r.fetched_twice:>9}  {codes:<14} {r.verdict}")  # fmt: skip
    silent = sum(r.silent_exits for r in results)
    hung = sum(r.verdict.startswith("HUNG") for r in results)
    lost = sum(r.lost for r in results)
    print(f"\npages lost: {lost} (target 0); silent exits: {silent} (target 0); hung: {hung}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--faults",
        default=",".join(name for name in FAULTS if name != "none"),
        help="comma-separated, of: "
        + "; ".join(f"{name} ({fault.what})" for name, fault in FAULTS.items())
        + f"; string:<key> for any of {', '.join(FrontierKeys.names())}",
    )
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the workers' logs")
    options = parser.parse_args()
    names = [name.strip() for name in options.faults.split(",") if name.strip()]
    unknown = [name for name in names if fault_named(name) is None]
    if unknown or not names or options.runs < 1 or options.pages < 10:
        parser.error(
            f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}, string:<key>"
            if unknown
            else "give at least one fault, --runs >= 1 and --pages >= 10"
        )
    faults = [fault for name in names if (fault := fault_named(name))]
    if options.store != "sqlite":
        skipped = [fault.name for fault in faults if fault.needs_sqlite]
        if skipped:
            print(f"skipped with --store {options.store}: {', '.join(skipped)}")
        faults = [fault for fault in faults if not fault.needs_sqlite]
    # A SIGTERM to the harness unwinds like Ctrl-C, so every process it started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(options.seed)
    results: list[Result] = []
    root = Path(tempfile.mkdtemp(prefix="chaos-"))
    try:
        for number in range(1, options.runs + 1):
            for fault in faults:
                workdir = root / f"{number}-{fault.name}"
                workdir.mkdir()
                chaos = Chaos(fault, random.Random(rng.random()), options.pages, options.store,
                              workdir)  # fmt: skip
                results.append(chaos.run(number))
                report(results[-1])
    finally:
        if options.keep:
            print(f"logs in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    table(results)
    if options.json:
        options.json.write_text(json.dumps([result_json(r) for r in results], indent=1))
    sys.exit(1 if any(r.verdict.startswith(FAILING) for r in results) else 0)


def result_json(result: Result) -> dict[str, object]:
    fields = {name: value for name, value in vars(result).items() if name != "workers"}
    fields["workers"] = {
        name: [vars(life) for life in lives] for name, lives in result.workers.items()
    }
    return fields


if __name__ == "__main__":
    main()
