"""What a person sees while a crawl runs and when it ends: a live status line on a terminal
(a pseudo-terminal here), a periodic log line off one, Scrapy's stats dump at INFO, and the
crawl summary last."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bloom_frontier.frontier.scheduler import RedisScheduler
from bloom_frontier.progress import ERASE_LINE
from tests.httpserver import TestServer, html

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]
#: About 4 s at one request at a time: several redraws of the live line.
SITE = {"/": html(*(f"/p/{i}" for i in range(8)), "/p/0?utm_source=x")} | {
    f"/p/{i}": html("/") for i in range(8)
}


def assert_summary_last(output: str) -> None:
    """The crawl summary ends ``output``: no log record after it, and its last line is the
    last of the commands it says to run next."""
    summary = output[output.rindex("Crawl summary") :]
    assert not re.search(r"\] (DEBUG|INFO|WARNING|ERROR):", summary), output[-2000:]
    assert re.search(r"\n {26}scrapy \S.*  # [^\n]+$", summary.rstrip()), output[-2000:]


def crawl_command(server: TestServer, tmp_path: Path, redis_url: str) -> list[str]:
    store = f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}"
    command = [*SCRAPY, "crawl", "site", "-a", f"start_url={server.url}/",
               "-s", "CONCURRENT_REQUESTS=1", "-s", store]  # fmt: skip
    return command + (["-s", f"REDIS_URL={redis_url}"] if redis_url else [])


def run_on_a_terminal(command: list[str]) -> str:
    """``command``'s output as a terminal receives it (stdout and stderr on one pty)."""
    controller, terminal = pty.openpty()
    os.set_blocking(controller, True)
    process = subprocess.Popen(command, cwd=ROOT, stdout=terminal, stderr=terminal)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert process.wait(timeout=120) == 0, b"".join(chunks)[-3000:]
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_live_status_line_on_a_terminal_and_the_summary_last(
    tmp_path: Path, shared: bool, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("redis_url") if shared else ""
    with TestServer(SITE, delay=0.4) as server:
        output = run_on_a_terminal(crawl_command(server, tmp_path, redis_url))
    redraws = re.findall(
        re.escape(ERASE_LINE) + r"(\d+) pages, \d+ items, (?:(\d+) queued, )?(\d+) duplicates, "
        r"(\d+) pages/min, (\d+) errors, \d+:\d\d:\d\d",
        output,
    )
    assert len(redraws) >= 3, output[-3000:]
    fetched = [int(redraw[0]) for redraw in redraws]
    assert fetched == sorted(fetched) and fetched[-1] >= 5  # it moves
    assert int(redraws[-1][3]) > 0  # pages/min
    if not shared or hasattr(RedisScheduler, "__len__"):  # the shared queue, once it tells
        assert any(redraw[1] for redraw in redraws)
    assert "Crawled " not in output and "Progress:" not in output  # no periodic log lines
    # Log records never share a visible line with the status, which is erased at the end:
    # what stays on screen of each line is what follows its last erase.
    screen = [line.rpartition(ERASE_LINE)[2] for line in output.split("\n")]
    assert not [line for line in screen if re.search(r"\d+ pages, \d+ items", line)]
    # Scrapy's stats dump, then the summary: the last thing on the screen.
    assert output.index("INFO: Dumping Scrapy stats:") < output.rindex("Crawl summary")
    assert_summary_last(output)


def test_off_a_terminal_a_periodic_log_line_and_the_summary_last(tmp_path: Path) -> None:
    with TestServer(SITE, delay=0.4) as server:
        result = subprocess.run(
            [*crawl_command(server, tmp_path, ""), "-s", "LOGSTATS_INTERVAL=1"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stderr
    assert ERASE_LINE not in log
    assert len(re.findall(r"INFO: Progress: \d+ pages, \d+ items, \d+ queued", log)) >= 3
    assert log.index("INFO: Dumping Scrapy stats:") < log.rindex("Crawl summary")
    assert_summary_last(log)
