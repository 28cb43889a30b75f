"""Learning from content during real crawls of a local site (embedded frontier).

What was fetched is read from the server's own log; rules and fingerprints from the store.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import redis

from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import APPLIED, PROPOSED, REVOKED
from tests.learnsite import LearnSite, duplicate_ratio

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]


def scrapy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCRAPY, *args], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )


def crawl(site: LearnSite, store: str, *settings: str) -> tuple[list[str], str]:
    """Crawl the site; (paths the server answered, the crawl's log)."""
    with site.server() as server:
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


def rules_in(store_url: str) -> dict[str, str]:
    store = StoreReader.from_url(store_url)
    try:
        return {rule.name: rule.state for rule in store.param_rules()}
    finally:
        store.close()


def assert_learned_where_proven(rules: dict[str, str], log: str) -> None:
    """from/src/view change nothing anywhere: host rules (path rules may come first);
    lang translates products, so it is learned for articles only."""
    assert set(rules.values()) == {APPLIED}, log[-3000:]
    host_rules = {name for name in rules if name.startswith("127.0.0.1?")}
    assert host_rules == {"127.0.0.1?from", "127.0.0.1?src", "127.0.0.1?view"}, log[-3000:]
    assert "127.0.0.1/articles/*?lang" in rules, log[-3000:]
    assert not any(name.endswith("?lang") and "articles" not in name for name in rules)


def test_apply_learns_neutral_parameters_and_never_merges_a_meaningful_one(
    tmp_path: Path,
) -> None:
    site = LearnSite(pages=20)
    plain, _ = crawl(site, f"sqlite:///{tmp_path / 'off.sqlite'}", "CANON_LEARN=off")
    store = f"sqlite:///{tmp_path / 'apply.sqlite'}"
    learned, log = crawl(site, store, "CANON_LEARN=apply", "CANON_LEARN_RECHECK=0")
    rules = rules_in(store)
    assert_learned_where_proven(rules, log)
    documents = site.documents(learned)
    # Every translated product linked was fetched: the meaningful parameter merged nothing.
    assert {f"/products/{i}?lang=de" for i in range(20)} <= set(documents)
    # Fewer fetches: how many fewer depends on when the rules arrive (bench/learning.py), so
    # the crawl on the same store that starts with them is the one held to a figure.
    assert sum(documents.values()) < sum(site.documents(plain).values())
    again, _ = crawl(site, store, "CANON_LEARN=propose")
    assert duplicate_ratio(site.documents(again)) < duplicate_ratio(site.documents(plain)) * 0.5
    assert {f"/products/{i}?lang=de" for i in range(20)} <= set(site.documents(again))
    # Nothing was learned from the soft-404 /missing/N pages or the 404 /gone/N answers.
    assert not any("missing" in name or "gone" in name for name in rules)


def test_shared_crawl_keeps_the_learned_rules_in_redis(tmp_path: Path, redis_url: str) -> None:
    site = LearnSite(pages=15)
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    paths, log = crawl(site, store, f"REDIS_URL={redis_url}", "CANON_LEARN=apply")
    rules = rules_in(store)
    assert_learned_where_proven(rules, log)
    client = redis.Redis.from_url(redis_url)
    version, shared = client.mget(["{site}:learned_version", "{site}:learned"])
    client.close()
    assert int(version) >= 4
    assert {f"{scope}?{name}" for scope, names in json.loads(shared).items() for name in names} == (
        set(rules)
    )
    documents = site.documents(paths)
    assert len(documents) == 1 + 3 * 15  # nothing meaningful merged
    # Without learning 3.3; the re-check of each number stratum of a young rule (0-3 here,
    # for each of the 4 parameters) costs up to 0.1-0.2 on this 46-document site.
    assert duplicate_ratio(documents) < 2.75


def test_propose_records_rules_for_review_and_the_next_crawl_applies_them(
    tmp_path: Path,
) -> None:
    site = LearnSite(pages=10)
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    first, _ = crawl(site, store)  # CANON_LEARN="propose" is the default
    proposed = rules_in(store)
    assert set(proposed.values()) == {PROPOSED}
    assert "127.0.0.1?from" in proposed
    # Proposals change nothing in the crawl that found them.
    assert any("from=nav" in path for path in first[len(first) // 2 :])

    audit = scrapy("audit-rules", "-s", f"STORE_URL={store}")
    summary = f"Learned parameter rules: {len(proposed)} proposed, 0 applied, 0 revoked"
    assert summary in audit.stdout, audit.stdout + audit.stderr
    assert "PROPOSED 127.0.0.1" in audit.stdout and "?view: " in audit.stdout
    assert "same content: http://127.0.0.1:" in audit.stdout
    assert "CONFLICT" not in audit.stdout
    names = sorted(rules_in(store))
    applied = scrapy(
        "audit-rules",
        "-s",
        f"STORE_URL={store}",
        *(arg for name in names for arg in ("--apply", name)),
    )
    assert f"0 proposed, {len(proposed)} applied" in applied.stdout, applied.stdout

    second, log = crawl(site, store, "CANON_LEARN_RECHECK=0")  # no sampled extra fetches
    documents = site.documents(second)
    assert duplicate_ratio(documents) == 1.0, (documents, log[-2000:])
    assert {f"/products/{i}?lang=de" for i in range(10)} <= set(documents)


def test_a_counter_example_found_later_revokes_the_rule(tmp_path: Path) -> None:
    """``from`` changes nothing on the articles crawled first, then starts to matter: the
    rule learned for them is revoked, reported, and the variants are fetched again."""
    site = LearnSite(pages=20, matters_below=8)
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    paths, log = crawl(site, store, "CANON_LEARN=apply", "CANON_LEARN_RECHECK=1")
    reader = StoreReader.from_url(store)
    rules = {rule.name: rule for rule in reader.param_rules()}
    reader.close()
    names = ("127.0.0.1?from", "127.0.0.1/articles/*?from")
    covering = [rules[name] for name in names if name in rules]
    revoked = [rule for rule in covering if rule.state == REVOKED]
    assert revoked, (sorted(rules), log[-3000:])
    assert all(rule.state != APPLIED for rule in covering)
    counter = revoked[0].counter_example
    assert counter is not None
    assert re.search(r"/articles/[0-7](\?|\s|$)", counter["url_a"] + " " + counter["url_b"])
    assert f"Revoked learned rule {revoked[0].name}" in log
    documents = site.documents(paths)
    assert all(f"/articles/{i}" in documents for i in range(20))


def test_fingerprints_are_stored_and_same_content_lists_the_variants(tmp_path: Path) -> None:
    site = LearnSite(pages=6)
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    crawl(site, store, "CANON_LEARN=off")
    reader = StoreReader.from_url(store)
    pages = {p["final_url"].split("/", 3)[3]: p for p in reader.fingerprinted_pages()}
    reader.close()
    # Per-request CSRF tokens and times differ, the normalized content does not.
    assert pages["articles/1"]["content_hash"] == pages["articles/1?view=print"]["content_hash"]
    assert pages["products/1"]["content_hash"] != pages["products/1?lang=de"]["content_hash"]
    assert pages["missing/1"]["content_kind"] == "soft-404"
    assert len(pages["articles/1"]["content_minhash"]) == 128 * 4

    result = scrapy("same-content", "-s", f"STORE_URL={store}", "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    groups = [json.loads(line) for line in result.stdout.splitlines()]
    article = next(g for g in groups if any(u.endswith("/articles/1") for u in g["urls"]))
    assert article["match"] == "exact"
    assert set(article["separated_by"]) <= {"from", "src", "view", "lang"}
    assert not any(
        any("products/1?lang=de" in u for u in g["urls"])
        and any(u.endswith("/products/1") for u in g["urls"])
        for g in groups
    )


def test_a_worker_joining_after_rules_were_learned_keys_like_the_others(
    tmp_path: Path, redis_url: str
) -> None:
    """The learned rules change the key version (``r2+<hash>``), not the prefix the crawl's
    keys carry: a worker that starts once rules are learned finds every key the first one
    stored, and fetches nothing again."""
    site = LearnSite(pages=10)
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    with site.server() as server:
        common = ["-a", f"start_url={server.url}/", "-s", f"STORE_URL={store}"]
        common += ["-s", f"REDIS_URL={redis_url}", "-s", "CANON_LEARN=apply"]
        first = scrapy("crawl", "site", *common)
        assert first.returncode == 0, first.stderr[-3000:]
        assert any(state == APPLIED for state in rules_in(store).values()), first.stderr[-3000:]
        fetched = len(server.paths())
        second = scrapy("crawl", "site", *common)
        assert second.returncode == 0, second.stderr[-3000:]
        again = [path for path in server.paths()[fetched:] if path != "/robots.txt"]
    assert again == [], second.stderr[-3000:]
