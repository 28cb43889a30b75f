"""Crawl the messy-web site of ``../shared/site`` the way a user would, for its scorer.

Run by ``bench/site.sh`` inside the site's loopback-only network namespace, with
``START_URL`` and ``EXPORT`` in the environment. Modes:

- ``embedded``: ``scrapy crawl site`` on embedded defaults (in-process Bloom, SQLite store).
- ``anchor``: plain Scrapy (``bench/anchor_scrapy.py``), the figure to compare against.
- ``shared``: ``--workers N`` workers on a shared Redis frontier (a private redis-server with
  RedisBloom and AOF, started here) and a shared PostgreSQL store (over its Unix socket, which
  the namespace still reaches); ``--kills K`` SIGKILLs worker 2 K times at random moments
  and restarts it, as an operator's crash would.

Scrapy arguments after ``--`` go to every crawl (``-- -s FRONTIER_HOST_CONCURRENCY=64``).

Afterwards the redirect map and the canonical hints are exported to ``EXPORT`` with the
project's own commands (``scrapy redirects --format hops``, ``scrapy canonicals``).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from tests.servers import RedisServer

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]
PG_SOCKET_DSN = "host=/var/run/postgresql user=postgres dbname=postgres"
PG_DATABASE = "bench_messy_site"


def scrapy(*args: str, **popen: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*SCRAPY, *args], cwd=ROOT, **popen)  # type: ignore[call-overload]


def fresh_postgres_store() -> str:
    """An empty database for this run, reached over the Unix socket."""
    with psycopg.connect(PG_SOCKET_DSN, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {PG_DATABASE}")
        connection.execute(f"CREATE DATABASE {PG_DATABASE}")
    return f"postgresql+psycopg://postgres@/{PG_DATABASE}?host=/var/run/postgresql"


def export(store_url: str, path: str) -> None:
    """Append the redirect hops and canonical hints the crawl recorded to ``path``. The two
    commands run at once (each is mostly its own start-up), each into a file of its own."""
    # Redirects as recorded hops (the scorer's shape), not as a map.
    exports = {"redirects": "hops", "canonicals": "jsonl"}
    parts = {command: Path(f"{path}.{command}") for command in exports}
    running = {}
    for command, fmt in exports.items():
        with parts[command].open("wb") as out:
            running[command] = scrapy(
                command, "--format", fmt, "-s", f"STORE_URL={store_url}", stdout=out
            )
    with open(path, "ab") as out:
        for command, done in running.items():
            if done.wait() != 0:
                raise SystemExit(f"scrapy {command} failed")
            out.write(parts[command].read_bytes())
            parts[command].unlink()


def crawl_embedded(start_url: str, workdir: Path, extra: list[str]) -> str:
    store_url = f"sqlite:///{workdir / 'crawl.sqlite'}"
    args = ["crawl", "site", "-a", f"start_url={start_url}", "-s", f"STORE_URL={store_url}"]
    if scrapy(*args, *extra).wait() != 0:
        raise SystemExit("crawl failed")
    return store_url


def crawl_anchor(start_url: str, workdir: Path) -> None:
    """Plain Scrapy (bench/anchor_scrapy.py), run outside the project so that none of its
    settings apply."""
    spider = Path(__file__).with_name("anchor_scrapy.py")
    command = [*SCRAPY, "runspider", str(spider), "-a", f"start_url={start_url}"]
    if subprocess.Popen(command, cwd=workdir).wait() != 0:
        raise SystemExit("anchor crawl failed")


def crawl_shared(
    start_url: str, workdir: Path, workers: int, kills: int, seed: int, extra: list[str]
) -> str:
    store_url = fresh_postgres_store()
    rng = random.Random(seed)
    with RedisServer(bloom=True, appendonly=True) as redis_server:
        args = [
            "crawl", "site", "-a", f"start_url={start_url}",
            "-s", f"REDIS_URL={redis_server.url}", "-s", f"STORE_URL={store_url}",
            "-s", "FRONTIER_LEASE_TTL=10", *extra,
        ]  # fmt: skip
        logs = [open(workdir / f"worker{i}.log", "ab") for i in range(workers)]  # noqa: SIM115
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = (time.monotonic(), usage.ru_utime + usage.ru_stime)
        procs = [scrapy(*args, stdout=log, stderr=subprocess.STDOUT) for log in logs]
        for kill in range(kills):
            time.sleep(rng.uniform(4, 12))
            victim = procs[-1]
            if victim.poll() is not None:
                print(f"kill {kill + 1}: worker already finished", file=sys.stderr)
                break
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            print(f"kill {kill + 1}: SIGKILLed worker {workers} and restarted it", file=sys.stderr)
            procs[-1] = scrapy(*args, stdout=logs[-1], stderr=subprocess.STDOUT)
        codes = [proc.wait() for proc in procs]
        for log in logs:
            log.close()
        if any(codes):
            raise SystemExit(f"worker exit codes {codes}; logs in {workdir}")
        with redis_server.client() as client:  # started for this crawl: its CPU is the crawl's
            info = client.info("cpu")
        report_crawl(workers, started, float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
    return store_url


def report_crawl(workers: int, started: tuple[float, float], redis_cpu: float) -> None:
    """Print (to stderr: the scorer's ``logs/crawl.out``) the crawl's own wall time and the
    CPU its workers and Redis spent, without the run's set-up and exports: on a machine
    whose cores the workers fill, CPU per document says what another worker costs."""
    wall = time.monotonic() - started[0]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers_cpu = usage.ru_utime + usage.ru_stime - started[1]
    print(
        f"crawl: {workers} worker(s), {wall:.2f} s, workers {workers_cpu:.2f} CPU-s, "
        f"redis {redis_cpu:.2f} CPU-s",
        file=sys.stderr,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["embedded", "shared", "anchor"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kills", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    options = parser.parse_args(argv[:split])
    options.extra = argv[split + 1 :]  # more scrapy arguments, after --
    start_url, export_path = os.environ["START_URL"], os.environ["EXPORT"]
    workdir = Path(tempfile.mkdtemp(prefix="messy-site-"))
    if options.mode == "anchor":
        crawl_anchor(start_url, workdir)
        return
    if options.mode == "embedded":
        store_url = crawl_embedded(start_url, workdir, options.extra)
    else:
        store_url = crawl_shared(
            start_url, workdir, options.workers, options.kills, options.seed, options.extra
        )
    export(store_url, export_path)


if __name__ == "__main__":
    main()
