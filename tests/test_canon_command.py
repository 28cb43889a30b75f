"""``scrapy canon``, run as a user runs it: the project's scrapy in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bloom_frontier.canonical import RULES_VERSION, dedupe_key

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = Path(sys.executable).with_name("scrapy")


def canon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRAPY), "canon", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def json_reports(result: subprocess.CompletedProcess[str]) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_shows_each_step_for_a_person() -> None:
    url = "https://youtu.be/kJQP7kiw5Fk?t=42&si=9xQd1Kk2"
    result = canon(url, "HTTP://Example.com:80/a//b;jsessionid=1?utm_source=x&b=2#top")
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert f"fetch URL: {url}" in lines
    assert "stage 1:   https://youtu.be/kJQP7kiw5Fk?si=9xQd1Kk2&t=42" in lines
    assert "identity:  youtube:kJQP7kiw5Fk" in lines
    assert f"key:       {RULES_VERSION}|youtube:kJQP7kiw5Fk" in lines
    assert "rules:     tracking:si, identity:youtube" in lines
    assert f"key:       {RULES_VERSION}|http://example.com/a/b?b=2" in lines
    assert "rules:     session:jsessionid, slashes, tracking:utm_source" in lines


def test_json_gives_the_same_keys_as_the_library() -> None:
    urls = [
        "https://www.youtube.com/watch?app=desktop&feature=share&v=kJQP7kiw5Fk",
        "https://news.ycombinator.com/item?id=8863&utm_source=x",
        "https://example.com/docs/",
    ]
    result = canon("--json", *urls)
    assert result.returncode == 0, result.stderr
    reports = json_reports(result)
    assert [report["url"] for report in reports] == urls
    assert [report["key"] for report in reports] == [dedupe_key(url) for url in urls]
    assert reports[0]["identity"] == {"provider": "youtube", "id": "kJQP7kiw5Fk", "part": None}
    assert reports[0]["rules_fired"] == ["tracking:feature", "identity:youtube"]
    assert reports[1]["rules_fired"] == ["allowlist:news.ycombinator.com/item"]
    assert reports[2]["rules_fired"] == []
    assert all(report["error"] is None for report in reports)


def test_invalid_url_reports_its_reason_and_fails() -> None:
    result = canon("--json", "javascript:alert(1)", "https://example.com/")
    assert result.returncode == 1
    invalid, valid = json_reports(result)
    assert invalid["error"]["reason"] == "unsupported-scheme"
    assert invalid["key"] is None
    assert invalid["fetch_url"] is None
    assert valid["key"] == f"{RULES_VERSION}|https://example.com/"

    text = canon("http://exa mple.com/")
    assert text.returncode == 1
    assert "INVALID:   bad-host" in text.stdout


def test_uses_the_projects_host_rules() -> None:
    rules = {"example.com": {"strip": ["si"], "disable": ["slashes"]}}
    result = canon(
        "--json", "-s", f"CANON_HOST_RULES={json.dumps(rules)}", "https://example.com//a?si=1"
    )
    assert result.returncode == 0, result.stderr
    (report,) = json_reports(result)
    version, _, url = report["key"].partition("|")
    assert version.startswith(f"{RULES_VERSION}+")
    assert url == "https://example.com//a"
    assert report["rules_fired"] == ["tracking:si"]


def test_bad_host_rules_and_missing_urls_are_usage_errors() -> None:
    bad = canon("-s", 'CANON_HOST_RULES={"example.com": {"disable": ["nothing"]}}', "https://a/")
    assert bad.returncode == 2
    # The settings check's one line (crawler/validation.py), before the command reads them.
    assert bad.stderr.startswith("error: CANON_HOST_RULES must be a table of per-host rules")
    assert bad.stderr.count("\n") == 1, bad.stderr
    missing = canon()
    assert missing.returncode == 2
    assert "give at least one URL" in missing.stderr
