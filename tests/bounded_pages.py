"""Crawls of pages made to cost much (a gzip bomb, a page of a million links), in a process
of their own, with their stats and peak memory: used by ``tests/test_bounded_pages.py`` and
``tests/test_loop_stalls.py``."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.crawls import ROOT, site_crawl_command
from tests.httpserver import Page


@dataclass
class Crawl:
    """A finished crawl: its exit code, log and peak resident memory (MiB)."""

    returncode: int
    log: str
    peak_rss_mb: int

    def stat(self, name: str) -> int | None:
        """The value of the stat ``name`` in Scrapy's stats dump (``STATS_DUMP``)."""
        match = re.search(rf"'{re.escape(name)}': (\d+)", self.log)
        return int(match[1]) if match else None


def start_crawl(
    start_url: str, tmp_path: Path, *settings: str, name: str = "crawl", spider: str = "site"
) -> Worker:
    """``scrapy crawl site`` (or another ``spider`` of ``tests.user_spiders``) from
    ``start_url`` with ``settings`` (``NAME=VALUE``), its stats dumped, logging to
    ``<name>.log``."""
    if spider != "site":
        settings = ("SPIDER_MODULES=tests.user_spiders", *settings)
    options = [item for setting in ("STATS_DUMP=True", *settings) for item in ("-s", setting)]
    command = site_crawl_command(start_url, tmp_path / "store.sqlite", *options)
    command[command.index("site")] = spider
    log_path = tmp_path / f"{name}.log"
    peak_path = tmp_path / f"{name}.peak-rss"
    measured = [sys.executable, "-m", "tests.peak_rss", str(peak_path), *command]
    with log_path.open("w") as log:
        process = subprocess.Popen(measured, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return Worker(process, log_path, peak_path)


@dataclass
class Worker:
    """A crawl running in a process of its own (under :mod:`tests.peak_rss`), where it logs
    and where its peak memory is written."""

    process: subprocess.Popen[bytes]
    log_path: Path
    peak_path: Path

    def wait(self) -> Crawl:
        """The crawl, once finished, with its own peak memory."""
        code = self.process.wait()
        return Crawl(code, self.log_path.read_text(), int(self.peak_path.read_text()) // 1024)


def crawl(start_url: str, tmp_path: Path, *settings: str, spider: str = "site") -> Crawl:
    """A crawl as :func:`start_crawl` starts it, finished."""
    return start_crawl(start_url, tmp_path, *settings, spider=spider).wait()


def links_page(count: int) -> Page:
    """A page of ``count`` links to distinct pages of its site (``/l/<i>``)."""
    return Page("<html><body>" + "".join(f'<a href="/l/{i}">l</a>' for i in range(count)))
