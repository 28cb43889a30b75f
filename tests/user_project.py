"""A Scrapy project of a user's own, as ``scrapy startproject`` makes it, adopting the
frontier the way the README says: its ``ADDONS`` line and a ``CrawlSpider`` with Scrapy's
default ``LinkExtractor``. Shared by the tests that crawl as a user would (the add-on, an own
project, the installed wheel)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: A user's spider: every link followed, an item per page; ``SITE_URL`` names the site.
CRAWL_SPIDER = """
import os

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class UserSpider(CrawlSpider):
    name = "{name}"
    allowed_domains = ["127.0.0.1"]
    start_urls = [os.environ["SITE_URL"] + "/"]
    rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)

    def parse_item(self, response):
        yield {{"url": response.url, "status": response.status}}
"""

#: The template's politeness lines, and what the tests' local sites allow instead.
FAST = [
    ("DOWNLOAD_DELAY = 1", "DOWNLOAD_DELAY = 0"),
    ("CONCURRENT_REQUESTS_PER_DOMAIN = 1", "CONCURRENT_REQUESTS_PER_DOMAIN = 8"),
]


def readme_addons_line() -> str:
    """The line the README tells a user to add to their settings."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    found = [line for line in lines if line.startswith("ADDONS = {")]
    assert len(found) == 1, found
    return found[0]


def adopt(project: Path, spider: str, *, fast: bool = True, extra: str = "") -> None:
    """Give the ``startproject`` project at ``project`` the user's spider ``spider`` and
    the README's ADDONS line (with ``fast``, no delay between a local site's pages), plus
    ``extra`` lines of settings."""
    package = next(path.parent for path in project.glob("*/settings.py"))
    source = CRAWL_SPIDER.format(name=spider)
    (package / "spiders" / f"{spider}.py").write_text(source, encoding="utf-8")
    settings_file = package / "settings.py"
    settings = settings_file.read_text(encoding="utf-8")
    for template, ours in [("ADDONS = {}", readme_addons_line()), *(FAST if fast else [])]:
        line = rf"^{re.escape(template)}$"
        assert re.search(line, settings, re.MULTILINE), template
        settings = re.sub(line, ours, settings, flags=re.MULTILINE)
    settings_file.write_text(settings + extra, encoding="utf-8")
