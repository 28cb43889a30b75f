"""Make sure the services the test suite needs are there: ``python -m tests.services ensure``.

Checked: ``redis-server`` and the RedisBloom module (the suite starts its own servers from
them), PostgreSQL at 127.0.0.1:5432 with a database ``test`` (started with
``pg_ctlcluster`` and the database created if needed), and Debian's ``nginx``, ``apache2`` and
``chromium`` (installed with ``apt-get`` when missing: the redirect-map tests load the maps into
real servers and render the audit report in a real browser), and ``tmux`` (the
``frontier --watch`` test reads its screen from a detached session). Exits non-zero with the fix on
failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
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


#: Debian packages the suite runs, by the executable that shows each one is installed.
DEBIAN_TOOLS = {"nginx": "nginx", "apache2": "apache2", "chromium": "chromium", "tmux": "tmux"}
APT_TIMEOUT = 900
#: Debian installs daemons under sbin, which an unprivileged ``$PATH`` may lack.
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"


def tool_path(executable: str) -> Path | None:
    """Where ``executable`` is installed (``$PATH``, then the sbin directories), or None."""
    found = shutil.which(executable) or shutil.which(executable, path=SBIN_PATH)
    return Path(found) if found else None


def _apt_get(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "-y", "-q", *args]
    try:
        return subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServiceUnavailable(f"`{' '.join(command)}` failed: {exc}") from exc


def install_debian_packages(packages: list[str]) -> None:
    """``apt-get install`` ``packages``, after ``apt-get update`` when the package lists are
    missing or stale (the first attempt fails); a one-line reason when that is impossible."""
    fix = f"install them as root: `apt-get update && apt-get install -y {' '.join(packages)}`"
    if shutil.which("apt-get") is None:
        raise ServiceUnavailable(f"{', '.join(packages)} missing and no apt-get here; {fix}")
    if os.geteuid() != 0:
        raise ServiceUnavailable(f"{', '.join(packages)} missing and not root; {fix}")
    result = _apt_get("install", "--no-install-recommends", *packages)
    if result.returncode != 0:
        _apt_get("update")
        result = _apt_get("install", "--no-install-recommends", *packages)
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ServiceUnavailable(
            f"apt-get could not install {' '.join(packages)} ({detail}); {fix}"
        )


def debian_tool(executable: str) -> Path:
    """The path of one of :data:`DEBIAN_TOOLS`, installed first when missing."""
    path = tool_path(executable)
    if path is None:
        install_debian_packages([DEBIAN_TOOLS[executable]])
        path = tool_path(executable)
    if path is None:
        raise ServiceUnavailable(f"{executable} is still missing after installing its package")
    return path


def ensure_debian_tools() -> None:
    """Every one of :data:`DEBIAN_TOOLS` is installed (the missing ones in one apt-get run)."""
    missing = [package for exe, package in DEBIAN_TOOLS.items() if tool_path(exe) is None]
    if missing:
        install_debian_packages(missing)
    for executable in DEBIAN_TOOLS:
        debian_tool(executable)


def ensure() -> list[str]:
    """Check or start every service; return the problems found (empty: all good)."""
    problems = []
    for check in (redis_server_path, redisbloom_module_path, ensure_postgres, ensure_debian_tools):
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
        print(
            "tests.services: redis-server, RedisBloom, PostgreSQL (database test), "
            "nginx, apache2, chromium and tmux ready"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
