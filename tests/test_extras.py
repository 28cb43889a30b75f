"""What only one backend needs is an extra: without it, the crawl or command that needs it
stops with one ``error:`` line naming the extra to install, and nothing else needs it."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from tests.httpserver import TestServer, html
from tests.redirect_server import ROOT, scrapy

#: Makes ``psycopg`` and ``hiredis`` impossible to import in the processes started with it on
#: the path, as in an environment where the extras are not installed.
WITHOUT_EXTRAS = 'import sys\nsys.modules["psycopg"] = sys.modules["hiredis"] = None\n'
POSTGRES_URL = "postgresql://crawler@127.0.0.1:1/crawl"
FIX = "pip install 'bloom-frontier[postgres]'"


@pytest.fixture
def without_extras(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(WITHOUT_EXTRAS)
    env = {key: value for key, value in os.environ.items() if key not in {"REDIS_URL"}}
    return {**env, "PYTHONPATH": str(tmp_path), "STORE_URL": POSTGRES_URL}


@pytest.mark.parametrize(
    "command",
    [
        ("crawl", "site", "-a", "start_url=http://127.0.0.1:1/"),
        ("redirects",),
        ("same-content",),
    ],
)
def test_a_postgres_store_without_the_extra_is_one_error_line(
    command: tuple[str, ...], without_extras: dict[str, str]
) -> None:
    done = scrapy(*command, env=without_extras)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: ") and FIX in lines[0], lines[0]
    assert done.returncode == 2


def test_an_embedded_crawl_needs_no_extra(tmp_path: Path, without_extras: dict[str, str]) -> None:
    """SQLite and no Redis: the package's own dependencies are enough."""
    env = {**without_extras, "STORE_URL": f"sqlite:///{tmp_path / 'crawl.sqlite'}"}
    with TestServer({"/": html("/a"), "/a": html("/")}) as server:
        done = scrapy("crawl", "site", "-a", f"start_url={server.url}/", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert sorted(path for path in server.paths() if path != "/robots.txt") == ["/", "/a"]


def test_psycopg_hiredis_and_datasketch_are_not_required() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = " ".join(project["dependencies"])
    for name in ("psycopg", "hiredis", "datasketch", "scipy"):
        assert name not in required
    assert project["optional-dependencies"]["postgres"] == ["psycopg[binary]>=3.1.4"]
