"""The README as a newcomer reads it: two set-up commands on a fresh clone, then how to use
the package in one's own project, then every command with every option its parser takes.

The options are read from the commands' parsers (the ``scrapy.commands`` entry points of the
installed distribution, as ``scrapy`` builds them), so an option added to a command fails here
until the README says what it does, and one the README names that no parser has (removed,
renamed) fails too.
"""

from __future__ import annotations

import inspect
import re
from importlib import metadata
from pathlib import Path

import pytest
from scrapy.cmdline import ScrapyArgumentParser
from scrapy.commands import ScrapyCommand
from scrapy.settings import Settings

from bloom_frontier.spiders.site import SiteSpider
from tests.user_project import readme_addons_line

README = Path(__file__).resolve().parent.parent / "README.md"
#: An option as the README writes it: in backticks, ``--name`` or ``-x``, then its value.
DOCUMENTED = re.compile(r"`(--?[A-Za-z][\w-]*)")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def section(level: int, title: str, text: str) -> str:
    """The text under the one heading of ``level`` whose title is ``title`` or starts with
    ``title`` and a space or a backtick, up to the next heading of the same or a higher
    level."""
    heading = rf"^{'#' * level} {re.escape(title)}(?:[ `].*)?$"
    found = list(re.finditer(heading, text, re.MULTILINE))
    assert len(found) == 1, f"one heading {title!r} in README.md, not {len(found)}"
    rest = text[found[0].end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start() if end else len(rest)]


def parser_of(command: ScrapyCommand) -> ScrapyArgumentParser:
    """``command``'s parser, as ``scrapy`` builds it."""
    parser = ScrapyArgumentParser(conflict_handler="resolve")
    command.settings = Settings()
    command.add_options(parser)
    return parser


def options_of(parser: ScrapyArgumentParser, *, scrapys: bool = False) -> set[str]:
    """The option strings of ``parser``'s own options, or (``scrapys``) of the options every
    command has, Scrapy's "Global Options" (``-s``, ``--logfile``...)."""
    found = set()
    for group in parser._action_groups:
        if (group.title == "Global Options") == scrapys:
            found |= {option for action in group._group_actions for option in action.option_strings}
    return found - {"-h", "--help"}


#: The package's commands, by name, as the installed distribution declares them.
COMMANDS = {
    entry.name: entry.load()()
    for entry in metadata.distribution("bloom-frontier").entry_points
    if entry.group == "scrapy.commands"
}
#: The options every command has.
GLOBAL_OPTIONS = options_of(parser_of(COMMANDS["canon"]), scrapys=True)


def test_a_fresh_clone_needs_exactly_two_commands() -> None:
    """The first section's one code block: ``make crawl URL=...`` and ``make test``."""
    (first, *_rest) = re.split(r"^## ", readme(), flags=re.MULTILINE)[1:]
    commands = [line.split("#")[0].split() for line in first.splitlines() if line[:4] == "    "]
    assert [words[:2] for words in commands] == [["make", "crawl"], ["make", "test"]]
    assert commands[0][2].startswith("URL=")


def test_using_it_in_ones_own_project_comes_right_after_the_two_commands() -> None:
    """The second section: pip install, the ADDONS line, what it installs, REDIS_URL."""
    headings = re.findall(r"^## (.*)$", readme(), flags=re.MULTILINE)
    assert headings[1] == "Use it in your own Scrapy project", headings
    adopting = section(2, "Use it in your own Scrapy project", readme())
    assert "pip install" in adopting
    assert readme_addons_line() in adopting
    assert "REDIS_URL" in adopting


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_of_every_command_is_documented(name: str) -> None:
    """Under the command's heading (``### `scrapy NAME``), each of its own options in
    backticks; no option named there that the command does not take."""
    text = section(3, f"`scrapy {name}", readme())
    parser = parser_of(COMMANDS[name])
    options = options_of(parser)
    assert options_of(parser, scrapys=True) == GLOBAL_OPTIONS
    documented = set(DOCUMENTED.findall(text))
    assert sorted(options - documented) == [], f"scrapy {name}: options not in README.md"
    assert sorted(documented - options - GLOBAL_OPTIONS) == [], f"scrapy {name}: no such option"


def test_every_argument_of_the_site_spider_is_documented() -> None:
    """``scrapy crawl site -a NAME=...``: each argument of the spider, under ``scrapy crawl``."""
    text = section(3, "`scrapy crawl", readme())
    parameters = inspect.signature(SiteSpider.__init__).parameters.values()
    arguments = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD][1:]
    assert arguments  # start_url, hosts...
    for argument in arguments:
        assert f"`-a {argument}=" in text, argument


def test_scrapys_own_options_are_said_once() -> None:
    """The options every command takes are listed once, in the commands' introduction."""
    introduction = section(2, "Commands", readme()).split("### ")[0]
    assert sorted(GLOBAL_OPTIONS - set(DOCUMENTED.findall(introduction))) == []
