"""``scrapy redirects``, ``scrapy canonicals`` and ``scrapy audit-rules`` on stores written
through the store API, on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.pipelines.records import (
    BLOCKED,
    FETCHED,
    SEEN,
    CanonicalHint,
    Chain,
    PageRecord,
    UrlAlias,
)
from bloom_frontier.pipelines.writer import StoreWriter
from tests.record_builders import A, B, C, chain, hop
from tests.redirect_server import ROOT, SCRAPY, command_rows, scrapy


def write(store_url: str, *chains: Chain) -> None:
    store = StoreWriter.from_url(store_url)
    for one in chains:
        store.add_chain(one)
    store.close()


def by_source(rows: list[dict]) -> dict[str, dict]:
    return {row["source"]: row for row in rows}


def page(store_url: str, url: str, status: int = 200) -> None:
    store = StoreWriter.from_url(store_url)
    store.add_page(PageRecord(url, url, dedupe_key(url), status))
    store.close()


def test_map_is_transitive_across_chains(store_url: str) -> None:
    # A's chain stopped at B (already known); B's own chain went on to C.
    write(store_url, chain("1", SEEN, hop(A, B, 301)), chain("2", FETCHED, hop(B, C, 302)))
    rows = by_source(command_rows("redirects", store_url))
    assert rows[A] | {"source_key": None} == {
        "source": A,
        "target": C,
        "status": 302,
        "hops": 2,
        "hop_statuses": "301 302",
        "permanent": False,
        "outcome": "fetched",
        "final_status": None,
        "flag": None,
        "entry": True,
        "skip": None,
        "reason": None,
        "host": "e.org",
        "source_key": None,
        "referrer": None,
    }
    assert (rows[B]["target"], rows[B]["status"], rows[B]["hops"]) == (C, 302, 1)


def test_loop_across_chains_is_reported_not_followed(store_url: str) -> None:
    write(store_url, chain("1", SEEN, hop(A, B)), chain("2", SEEN, hop(B, A)))
    rows = by_source(command_rows("redirects", store_url))
    assert {(row["outcome"], row["target"], row["entry"]) for row in rows.values()} == {
        ("loop", None, False)
    }


def test_blocked_chain_is_no_entry_and_hides_the_address(store_url: str) -> None:
    private = "http://169.254.169.254/latest/meta-data/"
    write(store_url, chain("1", BLOCKED, hop(A, B), hop(B, private, 302)))
    rows = by_source(command_rows("redirects", store_url))
    assert {(row["outcome"], row["target"]) for row in rows.values()} == {("blocked", None)}


def test_same_key_hop_is_not_a_loop(store_url: str) -> None:
    http, https = "http://e.org/a", "https://e.org/a?utm_source=x"
    write(store_url, chain("1", FETCHED, hop(http, https), hop(https, C, 308)))
    rows = by_source(command_rows("redirects", store_url))
    assert (rows[http]["target"], rows[http]["outcome"], rows[http]["status"]) == (
        C,
        "fetched",
        301,
    )


def test_permanent_only_leaves_out_mixed_chains(store_url: str) -> None:
    write(store_url, chain("1", FETCHED, hop(A, B, 301), hop(B, C, 302)))
    assert command_rows("redirects", store_url, "--permanent-only") == []
    write(store_url, chain("2", FETCHED, hop(A, B, 308), hop(B, C, 301)))
    rows = command_rows("redirects", store_url, "--permanent-only")
    assert [(r["source"], r["target"], r["status"]) for r in rows] == [(A, C, 301), (B, C, 301)]


def test_error_end_and_flags(store_url: str) -> None:
    login = "https://e.org/login"
    write(
        store_url,
        chain("1", FETCHED, hop(A, B, 301)),
        chain("2", FETCHED, hop(C, login, 302), flag="soft-404:login"),
    )
    page(store_url, B, 404)
    page(store_url, login)
    rows = by_source(command_rows("redirects", store_url))
    assert (rows[A]["final_status"], rows[A]["entry"], rows[A]["skip"]) == (
        404,
        False,
        "final-status-404",
    )
    assert (rows[C]["flag"], rows[C]["entry"]) == ("soft-404:login", False)
    flagged = by_source(command_rows("redirects", store_url, "--include-flagged"))
    assert (flagged[C]["entry"], flagged[C]["target"]) == (True, login)


def test_csv_and_bulk_formats(store_url: str) -> None:
    write(
        store_url,
        chain("1", FETCHED, hop(A, B, 301)),
        chain("2", FETCHED, hop(C, "https://e.org/login", 302), flag="soft-404:login"),
    )
    result = scrapy("redirects", "-s", f"STORE_URL={store_url}", "--format", "csv")
    assert result.returncode == 0, result.stderr
    table = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["source"], r["target"], r["status"], r["entry"]) for r in table] == [
        (A, B, "301", "True"),
        (C, "https://e.org/login", "302", "False"),
    ]
    result = scrapy("redirects", "-s", f"STORE_URL={store_url}", "--format", "bulk")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["source,target,status", f"{A},{B},301"]


def test_canonicals_command_formats(store_url: str) -> None:
    store = StoreWriter.from_url(store_url)
    store.add_hints(
        [
            CanonicalHint(A, None, "link-element", "/b", B, dedupe_key(B), True, "same-site"),
            CanonicalHint(A, None, "link-header", B, B, dedupe_key(B), True, "same-site"),
            CanonicalHint(
                C, None, "link-element", "file:///c", "file:///c", None, False, "non-http-scheme"
            ),
        ]
    )
    store.close()
    rows = command_rows("canonicals", store_url)
    assert rows == [
        {"page": A, "canonical": B, "valid": True, "reason": "same-site", "problem": None},
        {
            "page": C,
            "canonical": "file:///c",
            "valid": False,
            "reason": "non-http-scheme",
            "problem": None,
        },
    ]
    result = scrapy("canonicals", "-s", f"STORE_URL={store_url}", "--format", "csv")
    assert result.stdout.splitlines()[0] == "page,canonical,valid,reason,problem"


def test_exports_concatenate_into_one_jsonl_file(store_url: str, tmp_path: Path) -> None:
    """The shape a scorer reads: hop lines and hint lines, one JSON object per line."""
    write(store_url, chain("1", FETCHED, hop(A, B, 308)))
    store = StoreWriter.from_url(store_url)
    store.add_hints([CanonicalHint(B, None, "link-element", "/b", B, dedupe_key(B), True, "self")])
    store.close()
    export = tmp_path / "export.jsonl"
    with export.open("a") as out:
        for command in (("redirects", "--format", "hops"), ("canonicals",)):
            out.write(scrapy(*command, "-s", f"STORE_URL={store_url}").stdout)
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    hops = [(row["from"], row["to"], row["status"]) for row in lines if "from" in row]
    hints = [(row["page"], row["canonical"], row["valid"]) for row in lines if "page" in row]
    assert (hops, hints) == ([(A, B, 308)], [(B, B, True)])


def write_aliases(store_url: str, pairs: list[tuple[str, str]]) -> None:
    store = StoreWriter.from_url(store_url)
    store.add_url_aliases([UrlAlias(url, key, "r0", "fetched") for url, key in pairs])
    store.close()


def test_audit_rules_reports_merges_splits_and_rejections(store_url: str) -> None:
    write_aliases(
        store_url,
        [
            # Old rules kept utm_*: two keys that the current rules merge.
            ("https://e.org/a?utm_source=x", "r0|https://e.org/a?utm_source=x"),
            ("https://e.org/a", "r0|https://e.org/a"),
            # Old rules lowercased paths: one key the current rules split.
            ("https://e.org/B", "r0|https://e.org/b"),
            ("https://e.org/b", "r0|https://e.org/b"),
            # Unchanged grouping (only the version prefix differs).
            ("https://e.org/c", "r0|https://e.org/c"),
            # Refused by the current rules.
            ("http://exa mple.org/", "r0|http://exa mple.org/"),
        ],
    )
    result = scrapy("audit-rules", "-s", f"STORE_URL={store_url}", "--format", "jsonl")
    assert result.returncode == 1, result.stderr  # a merge was found
    changes = [json.loads(line) for line in result.stdout.splitlines()]
    assert [c["change"] for c in changes] == ["merge", "split", "rejected"]
    merge, split, rejected = changes
    assert merge["old_keys"] == ["r0|https://e.org/a", "r0|https://e.org/a?utm_source=x"]
    assert merge["new_key"] == dedupe_key("https://e.org/a")
    assert split["old_key"] == "r0|https://e.org/b"
    assert split["new_keys"] == sorted(
        {dedupe_key("https://e.org/B"), dedupe_key("https://e.org/b")}
    )
    assert (rejected["url"], rejected["reason"]) == ("http://exa mple.org/", "bad-host")
    text = scrapy("audit-rules", "-s", f"STORE_URL={store_url}")
    assert "merges:         1" in text.stdout
    assert "unchanged keys: 1" in text.stdout


def test_audit_rules_without_changes_exits_zero(store_url: str) -> None:
    write_aliases(store_url, [(A, "r0|" + A), (B, "r0|" + B)])
    result = scrapy("audit-rules", "-s", f"STORE_URL={store_url}")
    assert result.returncode == 0, result.stderr
    assert "unchanged keys: 2" in result.stdout


def test_commands_refuse_a_missing_store(tmp_path: Path) -> None:
    for name in ("redirects", "canonicals", "audit-rules"):
        result = scrapy(name, "-s", f"STORE_URL=sqlite:///{tmp_path / 'none.sqlite'}")
        assert result.returncode != 0
        assert "no record store" in result.stderr
    assert not (tmp_path / "none.sqlite").exists()


def test_an_export_whose_reader_goes_away_ends_with_one_line(sqlite_url: str) -> None:
    """``scrapy redirects | head``: the reader closes the pipe; the command says so in one
    line and exits non-zero, without a traceback."""
    write(sqlite_url, *(chain(str(i), FETCHED, hop(f"{A}{i}", C, 301)) for i in range(50)))
    store = StoreWriter.from_url(sqlite_url)
    store.add_hints([CanonicalHint(B, None, "link-element", "/b", B, dedupe_key(B), True, "self")])
    store.close()
    for command in (["redirects", "--format", "csv"], ["canonicals", "--format", "jsonl"]):
        reader_gone = subprocess.Popen(
            [*SCRAPY, *command, "-s", f"STORE_URL={sqlite_url}"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert reader_gone.stdout is not None
        reader_gone.stdout.close()  # as `head` does once it has its lines
        _, stderr = reader_gone.communicate(timeout=120)
        assert stderr.splitlines() == [
            "error: the output was closed before the command finished"
        ], command
        assert reader_gone.returncode == 2
