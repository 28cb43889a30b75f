"""Make sure the services the test suite needs are there: ``python -m tests.services ensure``.

Checked: ``redis-server`` and the RedisBloom module (the suite starts its own servers from
them), and PostgreSQL at 127.0.0.1:5432 with a database ``test`` (started with
``pg_ctlcluster`` and the database created if needed). Exits non-zero with the fix on failure.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from psycopg import sql

from tests.servers import ServiceUnavailable, redis_server_path, redisbloom_module_path

PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
PG_DATABASE = "test"
PG_START_TIMEOUT = 30.0
PG_FIX = (
    "install and start PostgreSQL on 127.0.0.1:5432 with trust auth for user postgres "
    "(Debian: `apt-get install postgresql`), or set CI services accordingly"
)


def postgres_answers() -> bool:
    try:
        with psycopg.connect(PG_ADMIN_DSN) as connection:
            connection.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def start_postgres() -> None:
    """Start the local Debian cluster(s) ``main`` and wait until they accept connections."""
    config = Path("/etc/postgresql")
    versions = sorted(path.name for path in config.iterdir()) if config.is_dir() else []
    if not versions:
        raise ServiceUnavailable(f"PostgreSQL is not running and not installed; {PG_FIX}")
    for version in versions:
        command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"]
        try:
            subprocess.run(command, check=False, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceUnavailable(f"`{' '.join(command)}` failed: {exc}; {PG_FIX}") from exc
    deadline = time.monotonic() + PG_START_TIMEOUT
    while not postgres_answers():
        if time.monotonic() > deadline:
            raise ServiceUnavailable(
                f"PostgreSQL {', '.join(versions)} started but 127.0.0.1:5432 does not answer; "
                f"{PG_FIX}"
            )
        time.sleep(0.5)


def ensure_postgres() -> None:
    """PostgreSQL answers and has the database ``test``."""
    if not postgres_answers():
        start_postgres()
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)
        ).fetchone()
        if not exists:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PG_DATABASE)))


def ensure() -> list[str]:
    """Check or start every service; return the problems found (empty: all good)."""
    problems = []
    for check in (redis_server_path, redisbloom_module_path, ensure_postgres):
        try:
            check()
        except (ServiceUnavailable, psycopg.Error) as exc:
            problems.append(str(exc))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.services", description=__doc__)
    parser.add_argument("action", choices=["ensure"])
    parser.parse_args(argv)
    problems = ensure()
    for problem in problems:
        print(f"tests.services: {problem}", file=sys.stderr)
    if not problems:
        print("tests.services: redis-server, RedisBloom and PostgreSQL (database test) ready")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
