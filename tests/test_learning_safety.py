"""No learned rule merges two documents, on sites built to fool learning (issue 19).

Each case crawls one site of :mod:`tests.adversarial_sites` with ``CANON_LEARN=apply`` and the
default re-check rate, reads what was fetched from the server's own log and fails on any
document linked but never fetched (a false merge). The neutral site checks the saving kept.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import ParamRule
from tests.adversarial_sites import FOOLING, NEUTRAL, Case

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]


def scrapy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCRAPY, *args], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )


def crawl(case: Case, store: str, *settings: str) -> tuple[list[str], str]:
    """Crawl the case's site; (paths the server answered, the crawl's log)."""
    with case.server() as server:
        result = scrapy(
            "crawl",
            "site",
            "-a",
            f"start_url={server.url}/",
            "-s",
            f"STORE_URL={store}",
            *(arg for setting in settings for arg in ("-s", setting)),
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return [p for p in server.paths() if p != "/robots.txt"], result.stderr


def rules_in(store_url: str) -> list[ParamRule]:
    store = StoreReader.from_url(store_url)
    try:
        return list(store.param_rules())
    finally:
        store.close()


def assert_no_false_merge(name: str, tmp_path: Path) -> tuple[list[str], str, str]:
    """Crawl case ``name`` learning with rules applied; every document linked is fetched."""
    case = FOOLING[name]
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    paths, log = crawl(case, store, "CANON_LEARN=apply")
    missing = case.linked_documents() - set(case.fetched_documents(paths))
    rules = {rule.name: rule.state for rule in rules_in(store)}
    learning = [line for line in log.splitlines() if "learn" in line.lower()]
    assert not missing, f"merged: {sorted(missing)}\nrules: {rules}\n" + "\n".join(learning)
    return paths, log, store


def test_sort_neutral_on_one_item_lists_merges_no_longer_list(tmp_path: Path) -> None:
    assert_no_false_merge("sort", tmp_path)


def test_view_changing_one_template_merges_none_of_its_pages(tmp_path: Path) -> None:
    assert_no_false_merge("view", tmp_path)


def test_lang_translating_some_pages_merges_no_translation(tmp_path: Path) -> None:
    assert_no_false_merge("lang", tmp_path)


def test_parameter_neutral_on_the_pages_crawled_first_merges_none_of_the_later(
    tmp_path: Path,
) -> None:
    assert_no_false_merge("late", tmp_path)


def test_parameter_changing_one_line_of_a_long_page_merges_nothing(tmp_path: Path) -> None:
    assert_no_false_merge("small", tmp_path)


def test_counters_and_ads_neither_merge_nor_prove_a_sort(tmp_path: Path) -> None:
    assert_no_false_merge("noise", tmp_path)


def test_truly_neutral_parameters_are_still_learned(tmp_path: Path) -> None:
    plain, _ = crawl(NEUTRAL, f"sqlite:///{tmp_path / 'off.sqlite'}", "CANON_LEARN=off")
    store = f"sqlite:///{tmp_path / 'apply.sqlite'}"
    learned, log = crawl(NEUTRAL, store, "CANON_LEARN=apply")
    rules = {rule.name: rule.state for rule in rules_in(store)}
    assert {"127.0.0.1?from", "127.0.0.1?src"} <= {n for n, s in rules.items() if s == "applied"}
    assert NEUTRAL.linked_documents() == set(NEUTRAL.fetched_documents(learned))
    off, on = len(plain), len(learned)
    print(f"neutral site: {off} fetches without learning, {on} with ({1 - on / off:.0%} saved)")
    assert on < 0.8 * off, (off, on, log[-3000:])


def test_a_rule_found_wrong_is_revoked_its_merged_links_fetched_and_reported(
    tmp_path: Path,
) -> None:
    """``ref`` is neutral on the news crawled first: learned, then the stratified re-check
    finds it wrong on news 1-8; the rule is revoked, the links it merged are queued again
    and fetched (the false-merge check above), and both the summary and audit-rules say so."""
    _, log, store = assert_no_false_merge("late", tmp_path)
    (rule,) = [rule for rule in rules_in(store) if rule.param == "ref"]
    assert rule.state == "revoked" and rule.counter_example is not None, log[-3000:]
    requeued = re.search(
        r"learned rules: +\d+ proposed, \d+ applied, (\d+) revoked \((\d+) links", log
    )
    assert requeued is not None and int(requeued[1]) >= 1 and int(requeued[2]) >= 1, log[-3000:]
    audit = scrapy("audit-rules", "-s", f"STORE_URL={store}")
    assert f"REVOKED {rule.name}: {len(rule.evidence)} URL pairs" in audit.stdout, audit.stdout
    paths = len({pair[0].split("?")[0] for pair in rule.evidence})
    shown = re.search(
        rf"evidence: {len(rule.evidence)} pairs over {paths} distinct paths \(of (\d+) fetched "
        r"in [^)]+\); content similarity 1.00-1.00",
        audit.stdout,
    )
    assert shown is not None and int(shown[1]) == 40, audit.stdout
    assert "counter-example: " in audit.stdout and "/news/" in rule.counter_example["url_a"]
