"""The project's ``scrapy`` commands as entry points (``scrapy.commands`` in pyproject.toml),
so they work in any Scrapy project whose environment has this package installed.

Scrapy loads every entry point of that group on every ``scrapy`` run, ``scrapy crawl``
included. Each entry point here is a small class that imports its command only when that
command is used: a broken optional import (a database driver, say) can never break
``scrapy crawl``; the command itself then says why it is unavailable.
"""

from __future__ import annotations

import argparse
from importlib import import_module
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.utils.project import inside_project

from bloom_frontier.defaults import with_defaults


class Unavailable(ScrapyCommand):
    """Stands for a command whose module cannot be imported: says so, never a traceback."""

    requires_project = False
    requires_crawler_process = False

    def __init__(self, target: str, error: Exception) -> None:
        super().__init__()
        self.reason = f"{target} cannot be imported ({type(error).__name__}: {error})"

    def short_desc(self) -> str:
        return f"unavailable: {self.reason}"

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        raise UsageError(f"this command is unavailable: {self.reason}", print_help=False)


class LazyCommand:
    """A command imported on first use; everything else is the command's own.

    Not a ``ScrapyCommand`` itself, so that every attribute Scrapy reads or sets
    (``requires_project``, ``default_settings``, ``settings``, ``exitcode``...) goes to the
    command, once imported. The settings it is given get the defaults table
    (:mod:`bloom_frontier.defaults`) at add-on priority, as a crawl's do.
    """

    #: ``module:Class`` of the command.
    target: ClassVar[str]

    def __init__(self) -> None:
        object.__setattr__(self, "_command", None)

    def _load(self) -> ScrapyCommand:
        command = self.__dict__["_command"]
        if command is None:
            module, _, name = self.target.partition(":")
            try:
                command = getattr(import_module(module), name)()
            except ImportError as exc:
                command = self.unavailable(exc)
            object.__setattr__(self, "_command", command)
        return command

    def unavailable(self, error: ImportError) -> ScrapyCommand:
        """What stands for the command when its module cannot be imported."""
        return Unavailable(self.target, error)

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        """Outside a project, a project-only command stops here, as Scrapy's own do: one
        usage error, before Scrapy builds a crawler process (and starts logging)."""
        command = self._load()
        if command.requires_project and not inside_project():
            raise UsageError(
                "this command works only inside a Scrapy project (a folder with scrapy.cfg)",
                print_help=False,
            )
        command.process_options(args, opts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._load(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "settings" and value is not None:
            # No crawler, so no add-on: the command reads the defaults table itself.
            value = with_defaults(value)
        setattr(self._load(), name, value)


class Crawl(LazyCommand):
    """Scrapy's ``crawl``, after the add-on's pre-start checks (only in a project whose
    ``ADDONS`` has the add-on: other projects get Scrapy's command unchanged)."""

    target = "bloom_frontier.commands.crawl:Command"

    def unavailable(self, error: ImportError) -> ScrapyCommand:
        from scrapy.commands.crawl import Command

        return Command()  # ``scrapy crawl`` itself never breaks


class Canon(LazyCommand):
    target = "bloom_frontier.commands.canon:Command"


class Seed(LazyCommand):
    target = "bloom_frontier.commands.seed:Command"


class Frontier(LazyCommand):
    target = "bloom_frontier.commands.frontier:Command"


class Redirects(LazyCommand):
    target = "bloom_frontier.commands.redirects:Command"


class Canonicals(LazyCommand):
    target = "bloom_frontier.commands.canonicals:Command"


class AuditRules(LazyCommand):
    target = "bloom_frontier.commands.audit_rules:Command"


class SameContent(LazyCommand):
    target = "bloom_frontier.commands.same_content:Command"


class RebuildFilter(LazyCommand):
    target = "bloom_frontier.commands.rebuild_filter:Command"


class MigrationMap(LazyCommand):
    target = "bloom_frontier.commands.migration_map:Command"


class ValidateMap(LazyCommand):
    target = "bloom_frontier.commands.validate_map:Command"
