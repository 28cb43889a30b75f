"""docker-compose.yml and the Dockerfile, kept honest without a Docker engine or Compose.

The compose file is read as YAML, uninterpolated: what is checked is what a user of
``docker compose up`` notices (the services and their images, the data they keep, no port
published, the variable that must be set, workers that scale), and that the commands the
services run are commands of this project reading the environment they are given. Those
commands are then run here against local Redis (RedisBloom), PostgreSQL and HTTP servers.
The Dockerfile's install is repeated from exactly the files it copies. (No Compose v2 is
installable on the test machines; Debian's docker-compose 1.29 rejects the file's ``name``.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import yaml

from tests.conftest import PG_DSN
from tests.httpserver import TestServer, html

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = str(ROOT / ".venv" / "bin" / "scrapy")
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
CRAWL_TIMEOUT = 120
#: How the file names the variable a user must set (Compose stops with the message if unset).
START_URL = re.compile(r"\$\{START_URL:\?[^}]+\}")
#: A value for each variable the file gives the crawlers, as a user's environment might.
SAMPLE_ENV = {
    "REDIS_URL": "redis://redis:6379/0",
    "STORE_URL": "postgresql://postgres:secret@postgres:5432/crawler",
    "CONCURRENT_REQUESTS": "48",
    "LOG_LEVEL": "DEBUG",
}


def services() -> dict[str, dict[str, Any]]:
    """The compose file's services, as YAML reads them (anchors merged, nothing substituted)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def run(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``command`` run in ``cwd`` (the project), as a shell in the image would, with ``env``
    added to this environment; ``check``: a failure raises."""
    return subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


def scrapy(*args: str, env: Mapping[str, str] | None = None) -> str:
    """Output of ``scrapy ARGS`` run in the project, which must succeed."""
    return run([SCRAPY, *args], env=env, check=True).stdout


def crawler_services() -> dict[str, dict[str, Any]]:
    """The services running this project's image (their command starts with ``scrapy``)."""
    return {
        name: service
        for name, service in services().items()
        if service.get("command", [None])[0] == "scrapy"
    }


def with_start_url(command: Sequence[str], start_url: str) -> list[str]:
    """``command`` with ``start_url`` where it names ``START_URL``."""
    return [START_URL.sub(lambda _: start_url, arg) for arg in command]


def test_the_services_and_their_images() -> None:
    found = services()
    assert set(found) == {"redis", "postgres", "seed", "worker", "status"}
    assert found["redis"]["image"] == "redis:8"  # the BF.* commands built in
    assert found["postgres"]["image"] == "postgres:16"
    for name, service in crawler_services().items():
        assert service["build"] == ".", name
        assert (ROOT / service["build"] / "Dockerfile").is_file()
    assert set(crawler_services()) == {"seed", "worker", "status"}


def test_nothing_is_published_on_the_host() -> None:
    for name, service in services().items():
        assert "ports" not in service, name


def test_redis_and_postgres_keep_their_data() -> None:
    redis_service, postgres = services()["redis"], services()["postgres"]
    command = redis_service["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])


def test_start_url_must_be_set_for_the_crawl() -> None:
    """The seed and the workers name START_URL as required, with a message saying what to
    set (Compose refuses to start them without it)."""
    for name in ("seed", "worker"):
        named = [arg for arg in services()[name]["command"] if START_URL.search(arg)]
        assert len(named) == 1, name
        assert "set START_URL" in named[0]


def test_workers_scale_and_wait_for_the_seed() -> None:
    found = services()
    worker = found["worker"]
    # `--scale worker=N` refuses services with a fixed name or a published host port.
    assert "container_name" not in worker
    assert worker["depends_on"]["seed"] == {"condition": "service_completed_successfully"}
    assert found["seed"]["restart"] == "no"
    # Stopping a worker must not kill it before its downloads time out and its leases are back.
    grace = int(worker["stop_grace_period"].removesuffix("s"))
    timeout = float(scrapy("settings", "--get", "DOWNLOAD_TIMEOUT"))
    assert grace > timeout


def test_every_command_is_a_command_of_this_project() -> None:
    commands = set(re.findall(r"^  (\S+) ", scrapy("-h"), flags=re.MULTILINE))
    spiders = set(scrapy("list").split())
    for name, service in crawler_services().items():
        _scrapy, command, spider, *_args = service["command"]
        assert command in commands, f"{name}: no `scrapy {command}` in this project"
        assert spider in spiders, f"{name}: no spider {spider!r} in this project"
    worker = with_start_url(services()["worker"]["command"], "https://example.com/")
    assert worker[1:] == ["crawl", "site", "-a", "start_url=https://example.com/"]


def test_the_environment_reaches_the_settings() -> None:
    """Every variable the compose file gives the crawlers, and so each worker's environment,
    becomes the setting of that name, in the crawler process."""
    for name, service in crawler_services().items():
        assert set(service["environment"]) == set(SAMPLE_ENV), name
    assert urlsplit(SAMPLE_ENV["REDIS_URL"]).hostname in services()
    read = run(
        [
            sys.executable,
            "-c",
            "import json, sys; from scrapy.utils.project import get_project_settings; "
            "from scrapy.addons import AddonManager; "
            "s = get_project_settings(); "
            # What the crawler process does first: the add-on's defaults, env-derived.
            "AddonManager.load_pre_crawler_settings(s); "
            "print(json.dumps({n: str(s.get(n)) for n in sys.argv[1:]}))",
            *SAMPLE_ENV,
        ],
        env=SAMPLE_ENV,
        check=True,
    )
    assert json.loads(read.stdout) == SAMPLE_ENV


def test_the_services_urls_name_the_services() -> None:
    """REDIS_URL and STORE_URL point at the redis and postgres services, on their ports."""
    environment = services()["worker"]["environment"]
    redis_url, store_url = urlsplit(environment["REDIS_URL"]), urlsplit(environment["STORE_URL"])
    assert (redis_url.scheme, redis_url.hostname, redis_url.port) == ("redis", "redis", 6379)
    assert (store_url.scheme, store_url.hostname, store_url.port) == (
        "postgresql",
        "postgres",
        5432,
    )
    assert store_url.path == "/" + services()["postgres"]["environment"]["POSTGRES_DB"]


def site_pages(count: int) -> dict[str, Any]:
    """A small site: a home page linking to pages that link to each other."""
    routes: dict[str, Any] = {"/": html(*(f"/p/{n}" for n in range(count)))}
    for n in range(count):
        routes[f"/p/{n}"] = html("/", f"/p/{(n + 1) % count}", f"/p/{(n * 7) % count}")
    return routes


@pytest.mark.slow
def test_the_compose_commands_crawl_a_site(redis_url: str, pg_url: str, tmp_path: Path) -> None:
    """seed, then two workers, exactly as compose runs them, with local servers in place of
    the services: every page is fetched once and recorded in PostgreSQL."""
    with TestServer(site_pages(20)) as site:
        start_url = f"{site.url}/"
        commands = {
            name: with_start_url(service["command"], start_url)
            for name, service in crawler_services().items()
        }
        # The compose services' URLs replaced by the local ones, as Docker's DNS would
        # resolve them.
        env = {"REDIS_URL": redis_url, "STORE_URL": pg_url}

        seed = run([SCRAPY, *commands["seed"][1:]], env=env)
        assert seed.returncode == 0, seed.stderr
        assert seed.stdout.startswith("1 queued"), seed.stdout

        logs = [(tmp_path / f"worker-{n}.log").open("w") for n in range(2)]
        workers = [
            subprocess.Popen(
                [SCRAPY, *commands["worker"][1:]],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            for log in logs
        ]
        codes = [worker.wait(timeout=CRAWL_TIMEOUT) for worker in workers]
        for log in logs:
            log.close()
        tails = [(tmp_path / f"worker-{n}.log").read_text()[-3000:] for n in range(2)]
        assert codes == [0, 0], tails
        fetched = Counter(path for path in site.paths() if path != "/robots.txt")
        # The status view, once, as JSON instead of refreshing in place.
        status_command = commands["status"][1:]
        status_command[status_command.index("--watch")] = "--json"
        status = run([SCRAPY, *status_command], env=env)
        assert status.returncode == 0, status.stderr
        reading = json.loads(status.stdout.splitlines()[0])
        assert (reading["queued"], reading["leased"], reading["failed"]) == (0, 0, 0)
        assert reading["seen_keys"] == 21  # the home page and its 20 pages

    assert set(fetched) == {"/", *(f"/p/{n}" for n in range(20))}
    assert max(fetched.values()) == 1
    schema = re.search(r"search_path%3D(\w+)", pg_url)
    assert schema is not None
    with psycopg.connect(PG_DSN) as connection:
        stored = connection.execute(f'SELECT fetch_url FROM "{schema.group(1)}".pages').fetchall()
    assert sorted(url for (url,) in stored) == sorted(f"{site.url}{path}" for path in fetched)


def dockerfile_copies() -> list[tuple[str, str]]:
    """(source, destination) of each COPY from the build context."""
    copies = []
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words and words[0] == "COPY" and not any(w.startswith("--from") for w in words):
            *sources, destination = words[1:]
            assert destination.endswith("/"), f"COPY into a directory only: {line}"
            copies += [(source, destination) for source in sources]
    return copies


def test_the_dockerfile_copies_files_that_exist_and_are_not_ignored() -> None:
    ignored = [
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    packages = {"crawler/", "middlewares/", "pipelines/"}
    copied = {source for source, _destination in dockerfile_copies()}
    assert packages | {"pyproject.toml", "README.md", "scrapy.cfg"} <= copied
    for source in copied:
        assert (ROOT / source).exists(), source
        assert not any(fnmatch(source.rstrip("/"), pattern) for pattern in ignored), source


def copy_like_docker(source: Path, directory: Path) -> None:
    """COPY into a directory: a directory's contents go into it, a file goes into it."""
    if source.is_dir():
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(source, directory, dirs_exist_ok=True, ignore=ignore)
    else:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, directory / source.name)


@pytest.mark.slow
def test_the_image_install_has_every_file_the_worker_loads(tmp_path: Path) -> None:
    """``pip install .`` from just the copied files, then the worker's commands from there."""
    app, site_packages = tmp_path / "app", tmp_path / "site-packages"
    for source, destination in dockerfile_copies():
        copy_like_docker(ROOT / source, app / destination)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site_packages), str(app)],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    installed = {"PYTHONPATH": str(site_packages)}
    check = run(
        [
            sys.executable,
            "-c",
            "import bloom_frontier.frontier.redis.lua as r; print(r.__file__); "
            "r.script_source('admit')",
        ],
        env=installed,
        cwd=tmp_path,
        check=True,
    )
    assert check.stdout.startswith(str(site_packages))
    help_text = run([SCRAPY, "-h"], env=installed, cwd=app).stdout
    assert "seed" in help_text and "crawl" in help_text
