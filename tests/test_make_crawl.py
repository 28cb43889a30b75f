"""``make crawl URL=...``, the README's first command, with URLs a shell would mangle."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.httpserver import TestServer, html

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "target",
    ["/p?a=1&b=2", "/p?q=x;y", "/p?name=two words", '/p?who=O\'Brien&say="hi"'],
)
def test_the_url_reaches_the_crawl_intact(target: str, tmp_path: Path) -> None:
    with TestServer({target: html(), "/*": lambda _: html()}) as site:
        env = {**os.environ, "STORE_URL": f"sqlite:///{tmp_path / 'crawl.sqlite'}"}
        done = subprocess.run(
            ["make", "-s", "crawl", f"URL={site.url}{target}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        fetched = [unquote(path) for path in site.paths() if path != "/robots.txt"]
        assert fetched == [target]
