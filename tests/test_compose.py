"""docker-compose.yml and the Dockerfile, kept honest without a Docker engine.

The compose file is parsed and its variables substituted the way Compose does; the commands
its services run are then run here, with the environment they would get, against local
Redis (RedisBloom), PostgreSQL and HTTP servers. The Dockerfile's install is repeated from
exactly the files it copies.
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

#: ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}, and $$.
_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


class MissingVariable(KeyError):
    """A required variable (``${NAME:?message}``) is not set."""


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` (from the compose file) with Compose's variable substitution applied."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name", "op", "arg")
        current = env.get(name)
        unset = current is None or (current == "" and op is not None and op.startswith(":"))
        if not unset:
            return current or ""
        if op is not None and op.endswith("?"):
            raise MissingVariable(f"{name}: {arg}")
        return arg if op is not None else ""

    return _VARIABLE.sub(substitute, value)


def compose(env: Mapping[str, str]) -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE_FILE.read_text()), env)


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


SITE_ENV = {"START_URL": "https://example.com/"}


def crawler_services(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services running this project's image (their command starts with ``scrapy``)."""
    return {
        name: service
        for name, service in config["services"].items()
        if service.get("command", [None])[0] == "scrapy"
    }


def test_every_service_has_an_image_or_a_build() -> None:
    services = compose(SITE_ENV)["services"]
    assert set(services) == {"redis", "postgres", "seed", "worker", "status"}
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if "build" in service:
            assert (ROOT / service["build"] / "Dockerfile").is_file()


def test_redis_has_bloom_and_keeps_its_data() -> None:
    redis_service = compose(SITE_ENV)["services"]["redis"]
    # Redis 8 ships the BF.* commands; older images need redis/redis-stack-server.
    image, _, tag = redis_service["image"].partition(":")
    assert image == "redis/redis-stack-server" or (image == "redis" and int(tag.split(".")[0]) >= 8)
    command = redis_service["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"])


def test_start_url_is_required() -> None:
    with pytest.raises(MissingVariable, match="START_URL: set START_URL to the site to crawl"):
        compose({})


def test_workers_scale_and_wait_for_the_seed() -> None:
    services = compose(SITE_ENV)["services"]
    worker = services["worker"]
    # `--scale worker=N` refuses services with a fixed name or a published host port.
    assert "container_name" not in worker
    assert "ports" not in worker
    assert worker["depends_on"]["seed"] == {"condition": "service_completed_successfully"}
    assert services["seed"]["restart"] == "no"
    # Stopping a worker must not kill it before its downloads time out and its leases are back.
    grace = int(worker["stop_grace_period"].removesuffix("s"))
    timeout = float(scrapy("settings", "--get", "DOWNLOAD_TIMEOUT"))
    assert grace > timeout


def test_every_command_is_a_command_of_this_project() -> None:
    commands = set(re.findall(r"^  (\S+) ", scrapy("-h"), flags=re.MULTILINE))
    spiders = set(scrapy("list").split())
    services = crawler_services(compose(SITE_ENV))
    assert set(services) == {"seed", "worker", "status"}
    for name, service in services.items():
        _scrapy, command, spider, *_args = service["command"]
        assert command in commands, f"{name}: no `scrapy {command}` in this project"
        assert spider in spiders, f"{name}: no spider {spider!r} in this project"
    assert services["worker"]["command"][1:] == [
        "crawl",
        "site",
        "-a",
        f"start_url={SITE_ENV['START_URL']}",
    ]


def test_the_environment_reaches_the_settings() -> None:
    """Every variable the compose file gives the crawler becomes the setting of that name."""
    for env in (SITE_ENV, {**SITE_ENV, "CONCURRENT_REQUESTS": "48", "LOG_LEVEL": "DEBUG"}):
        for name, service in crawler_services(compose(env)).items():
            passed = {key: str(value) for key, value in service["environment"].items()}
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
                    *passed,
                ],
                env=passed,
                check=True,
            )
            assert json.loads(read.stdout) == passed, name
    assert passed["CONCURRENT_REQUESTS"] == "48"


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
        services = compose({"START_URL": start_url})["services"]

        def run_env(service: dict[str, Any]) -> dict[str, str]:
            env = {key: str(value) for key, value in service["environment"].items()}
            assert env["REDIS_URL"] == "redis://redis:6379/0"  # the compose service...
            assert env["STORE_URL"].startswith("postgresql://postgres:")
            # ...replaced by the local ones, as Docker's DNS would resolve them.
            return {**os.environ, **env, "REDIS_URL": redis_url, "STORE_URL": pg_url}

        seed = run([SCRAPY, *services["seed"]["command"][1:]], env=run_env(services["seed"]))
        assert seed.returncode == 0, seed.stderr
        assert seed.stdout.startswith("1 queued"), seed.stdout

        logs = [(tmp_path / f"worker-{n}.log").open("w") for n in range(2)]
        workers = [
            subprocess.Popen(
                [SCRAPY, *services["worker"]["command"][1:]],
                cwd=ROOT,
                env=run_env(services["worker"]),
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
        status_command = services["status"]["command"][1:]
        status_command[status_command.index("--watch")] = "--json"
        status = run([SCRAPY, *status_command], env=run_env(services["status"]))
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
