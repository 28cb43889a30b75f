"""``scrapy audit-rules`` in a deploy script: merges the applied learned rules made are
reported and exit 0; a merge a changed rule or a proposed learned rule would make exits 1.
On stores written by real crawls of a local site."""

from __future__ import annotations

import json
from pathlib import Path

from tests.learnsite import LearnSite
from tests.test_learning_crawl import crawl, rules_in, scrapy


def test_merges_of_applied_rules_exit_zero_and_a_changed_rule_exits_one(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    _, log = crawl(LearnSite(pages=10), store, "CANON_LEARN=apply", "CANON_LEARN_RECHECK=0")
    assert "127.0.0.1?from" in rules_in(store), log[-3000:]

    audit = scrapy("audit-rules", "-s", f"STORE_URL={store}")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "by applied learned rules:" in audit.stdout, audit.stdout
    assert "MERGE into" in audit.stdout and "(by applied learned rules)" in audit.stdout
    rows = [json.loads(line) for line in scrapy(
        "audit-rules", "-s", f"STORE_URL={store}", "--format", "jsonl"
    ).stdout.splitlines()]  # fmt: skip
    merges = [row for row in rows if row["change"] == "merge"]
    assert merges and all(row["expected"] for row in merges)

    # A rule change on top (lang dropped on products, where it translates): exit 1, that
    # merge reported as not made by the applied rules.
    changed = json.dumps({"127.0.0.1": {"strip": ["lang"]}})
    audit = scrapy("audit-rules", "-s", f"STORE_URL={store}", "-s", f"CANON_HOST_RULES={changed}")
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert any(
        line.startswith("MERGE into") and "/products/" in line and "(by" not in line
        for line in audit.stdout.splitlines()
    ), audit.stdout


def test_a_proposed_rule_that_would_merge_stored_keys_exits_one(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    crawl(LearnSite(pages=10), store)  # CANON_LEARN="propose"
    audit = scrapy("audit-rules", "-s", f"STORE_URL={store}")
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert "would merge" in audit.stdout
    names = sorted(rules_in(store))
    applied = scrapy(
        "audit-rules", "-s", f"STORE_URL={store}", *(a for n in names for a in ("--apply", n))
    )
    # Applied, the same merges are the rules' own: reported, exit 0.
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "by applied learned rules:" in applied.stdout
