"""docker-compose.yml and the Dockerfile, kept honest without a Docker engine or Compose.

The compose file is read as YAML, uninterpolated: what is checked is what a user of
``docker compose up`` notices (the services and their images, the data they keep, no port
published, the variable that must be set, workers that scale), and that the commands the
services run are commands of the image reading the environment they are given. Those
commands are then run here against local Redis (RedisBloom), PostgreSQL and HTTP servers.

The image is repeated without Docker: the wheel its build stage builds from exactly the files
it copies is the suite's installed wheel (:mod:`tests.installed_wheel`, with the same
extras), and every command runs with that wheel in ``/app`` as the runtime stage makes it
(only ``scrapy.cfg``). (No Compose v2 is installable on the test machines; Debian's
docker-compose 1.29 rejects the file's ``name``.)
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psycopg
import pytest
import yaml

from tests.conftest import PG_DSN
from tests.httpserver import TestServer, html

if TYPE_CHECKING:
    from tests.installed_wheel import Installed

pytest_plugins = ["tests.installed_wheel"]

ROOT = Path(__file__).resolve().parent.parent
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


@dataclass(frozen=True)
class Stage:
    """One ``FROM`` of the Dockerfile: its name and its instructions, continuation lines
    joined, as (instruction, arguments)."""

    name: str
    instructions: list[tuple[str, str]]

    def copies(self) -> list[tuple[str, str]]:
        """(source, destination) of each COPY from the build context."""
        copies = []
        for instruction, arguments in self.instructions:
            words = arguments.split()
            if instruction == "COPY" and not any(w.startswith("--from") for w in words):
                *sources, destination = words
                assert destination.endswith("/"), f"COPY into a directory only: {arguments}"
                copies += [(source, destination) for source in sources]
        return copies

    def runs(self) -> list[str]:
        return [arguments for instruction, arguments in self.instructions if instruction == "RUN"]


def dockerfile_stages() -> list[Stage]:
    """The Dockerfile's stages, in order."""
    stages: list[Stage] = []
    logical = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    for line in logical.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            stages.append(Stage(arguments.split(" AS ")[-1].strip(), []))
        else:
            stages[-1].instructions.append((instruction.upper(), " ".join(arguments.split())))
    return stages


@dataclass(frozen=True)
class Image:
    """The worker image without Docker: the installed wheel and the runtime stage's /app."""

    installed: Installed
    app: Path

    def run(
        self, command: Sequence[str], *, env: Mapping[str, str] | None = None, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``command`` run in /app, as a shell in the image would, with ``env`` added to the
        image's environment; ``check``: a failure raises."""
        result = self.installed.run(*command, cwd=self.app, timeout=60, **(env or {}))
        if check:
            result.check_returncode()
        return result

    def scrapy(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        """Output of ``scrapy ARGS`` run in /app, which must succeed."""
        return self.run([self.installed.scrapy, *args], env=env, check=True).stdout


@pytest.fixture(scope="module")
def image(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Image:
    """/app holding exactly what the runtime stage copies from the build context."""
    app = tmp_path_factory.mktemp("image") / "app"
    for source, destination in dockerfile_stages()[-1].copies():
        copy_like_docker(ROOT / source, app / destination)
    return Image(installed, app)


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


def test_workers_scale_and_wait_for_the_seed(image: Image) -> None:
    found = services()
    worker = found["worker"]
    # `--scale worker=N` refuses services with a fixed name or a published host port.
    assert "container_name" not in worker
    assert worker["depends_on"]["seed"] == {"condition": "service_completed_successfully"}
    assert found["seed"]["restart"] == "no"
    # Stopping a worker must not kill it before its downloads time out and its leases are back.
    grace = int(worker["stop_grace_period"].removesuffix("s"))
    timeout = float(image.scrapy("settings", "--get", "DOWNLOAD_TIMEOUT"))
    assert grace > timeout


def test_every_command_is_a_command_of_the_image(image: Image) -> None:
    commands = set(re.findall(r"^  (\S+) ", image.scrapy("-h"), flags=re.MULTILINE))
    spiders = set(image.scrapy("list").split())
    for name, service in crawler_services().items():
        _scrapy, command, spider, *_args = service["command"]
        assert command in commands, f"{name}: no `scrapy {command}` in this project"
        assert spider in spiders, f"{name}: no spider {spider!r} in this project"
    worker = with_start_url(services()["worker"]["command"], "https://example.com/")
    assert worker[1:] == ["crawl", "site", "-a", "start_url=https://example.com/"]


def test_the_environment_reaches_the_settings(image: Image) -> None:
    """Every variable the compose file gives the crawlers, and so each worker's environment,
    becomes the setting of that name, in the crawler process."""
    for name, service in crawler_services().items():
        assert set(service["environment"]) == set(SAMPLE_ENV), name
    assert urlsplit(SAMPLE_ENV["REDIS_URL"]).hostname in services()
    read = image.run(
        [
            image.installed.python,
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
def test_the_compose_commands_crawl_a_site(
    image: Image, redis_url: str, pg_url: str, tmp_path: Path
) -> None:
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

        seed = image.run([image.installed.scrapy, *commands["seed"][1:]], env=env)
        assert seed.returncode == 0, seed.stderr
        assert seed.stdout.startswith("1 queued"), seed.stdout

        logs = [(tmp_path / f"worker-{n}.log").open("w") for n in range(2)]
        workers = [
            image.installed.popen(
                image.installed.scrapy,
                *commands["worker"][1:],
                cwd=image.app,
                env=env,
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
        status = image.run([image.installed.scrapy, *status_command], env=env)
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


def test_the_dockerfile_copies_files_that_exist_and_are_not_ignored() -> None:
    ignored = [
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    build, runtime = dockerfile_stages()
    packages = {"crawler/", "middlewares/", "pipelines/"}
    assert {source for source, _ in build.copies()} == packages | {"pyproject.toml", "README.md"}
    assert runtime.copies() == [("scrapy.cfg", "./")]  # the rest comes in the wheel
    for source, _destination in build.copies() + runtime.copies():
        assert (ROOT / source).exists(), source
        assert not any(fnmatch(source.rstrip("/"), pattern) for pattern in ignored), source


def test_the_runtime_stage_installs_only_the_wheel_with_its_extras(image: Image) -> None:
    """The build stage builds a wheel; the runtime stage copies nothing else from it and
    installs that wheel with the extras the suite's installed wheel has."""
    build, runtime = dockerfile_stages()
    assert build.runs() == ["pip wheel --no-deps --wheel-dir /wheels ."]
    from_build = [arguments for _, arguments in runtime.instructions if "--from" in arguments]
    assert from_build == [f"--from={build.name} /wheels/ /wheels/"]
    commands = [shlex.split(command) for command in " && ".join(runtime.runs()).split("&&")]
    installs = [words for words in commands if words[:2] == ["pip", "install"]]
    assert installs == [["pip", "install", f"$1[{image.installed.extras}]"]], installs
    assert "set -- /wheels/*.whl" in runtime.runs()[0]  # $1: the one wheel built


def copy_like_docker(source: Path, directory: Path) -> None:
    """COPY into a directory: a directory's contents go into it, a file goes into it."""
    if source.is_dir():
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(source, directory, dirs_exist_ok=True, ignore=ignore)
    else:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, directory / source.name)


def record(wheel: Path) -> set[str]:
    """Each file of ``wheel`` with its hash and size (its ``RECORD``, but that line itself)."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
        return {line for line in archive.read(name).decode().split() if not line.startswith(name)}


@pytest.mark.slow
def test_the_image_installs_the_wheel_the_suite_tests(image: Image, tmp_path: Path) -> None:
    """The build stage's wheel, built from just the files it copies, is byte for byte the
    wheel the suite installs; installed, the worker's commands run from /app."""
    source = tmp_path / "src"
    for source_path, destination in dockerfile_stages()[0].copies():
        copy_like_docker(ROOT / source_path, source / destination)
    wheel = image.installed.build_wheel(source, tmp_path / "wheels")
    assert wheel.name == image.installed.wheel.name
    assert sorted(record(wheel) ^ record(image.installed.wheel)) == []
    check = image.run(
        [
            image.installed.python,
            "-c",
            "import bloom_frontier.frontier.redis.lua as r; print(r.__file__); "
            "r.script_source('admit')",
        ],
        check=True,
    )
    assert check.stdout.startswith(str(image.installed.venv))
    help_text = image.scrapy("-h")
    assert "seed" in help_text and "crawl" in help_text
    assert image.scrapy("list").split() == ["site"]
