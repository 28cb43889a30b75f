"""``scrapy canon URL...``: how each URL becomes its dedupe key.

For every URL: the fetch URL (``resolve_link`` of the URL against itself: what the crawler
would request), the stage-1 form, the provider identity, the key, and the rules that fired,
under the project's rules (``CANON_HOST_RULES`` included). ``--json`` prints one JSON object
per URL instead. Each invalid URL also gets an ``error:`` line on stderr, and the command
then exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from bloom_frontier.canonical import InvalidURL, explain, resolve_link
from bloom_frontier.canonical.rules import RuleSet, rules_from_settings
from bloom_frontier.commands._failures import fails_cleanly


def describe(url: str, rules: RuleSet) -> dict[str, Any]:
    """Everything ``canon`` reports about ``url``, as JSON-ready data."""
    report: dict[str, Any] = {
        "url": url,
        "fetch_url": resolve_link(url, url),
        "canonical": None,
        "identity": None,
        "key": None,
        "rules_fired": [],
        "error": None,
    }
    try:
        explanation = explain(url, rules)
    except InvalidURL as error:
        report["error"] = {"reason": error.reason, "message": str(error)}
        return report
    identity = explanation.identity
    report.update(
        canonical=explanation.canonical,
        identity=None
        if identity is None
        else {"provider": identity.provider, "id": identity.id, "part": identity.part},
        key=explanation.key,
        rules_fired=list(explanation.rules_fired),
    )
    return report


def as_text(report: dict[str, Any]) -> str:
    """The report for a person: one labelled line per fact."""
    lines = [report["url"]]
    fetch = report["fetch_url"]
    lines.append(f"  fetch URL: {fetch if fetch is not None else '(none: not a fetchable link)'}")
    if report["error"] is not None:
        lines.append(f"  INVALID:   {report['error']['message']}")
        return "\n".join(lines)
    identity = report["identity"]
    identity_text = "none" if identity is None else f"{identity['provider']}:{identity['id']}"
    if identity is not None and identity["part"] is not None:
        identity_text += f" (part {identity['part']})"
    lines += [
        f"  stage 1:   {report['canonical']}",
        f"  identity:  {identity_text}",
        f"  key:       {report['key']}",
        f"  rules:     {', '.join(report['rules_fired']) or '(none)'}",
    ]
    return "\n".join(lines)


class Command(ScrapyCommand):
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--json] URL [URL ...]"

    def short_desc(self) -> str:
        return "Show how URLs become dedupe keys (fetch URL, stage 1, identity, key, rules)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--json", action="store_true", help="one JSON object per URL, for machines"
        )

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args:
            raise UsageError("give at least one URL")
        assert self.settings is not None
        try:
            rules = rules_from_settings(self.settings)
        except ValueError as error:
            print(f"invalid CANON_HOST_RULES: {error}", file=sys.stderr)
            self.exitcode = 2
            return
        reports = [describe(url, rules) for url in args]
        if opts.json:
            for report in reports:
                print(json.dumps(report, ensure_ascii=False))
        else:
            print("\n\n".join(as_text(report) for report in reports))
        invalid = [report for report in reports if report["error"] is not None]
        for report in invalid:
            print(f"error: {report['error']['message']}", file=sys.stderr)
        if invalid:
            self.exitcode = 1
