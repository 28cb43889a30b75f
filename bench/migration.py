"""Migration matching: quality on migrated copies of a real docs tree, and scale.

    .venv/bin/python -m bench.migration quality [--seeds 1,2,3] [--src DOCS_TREE]
    .venv/bin/python -m bench.migration crawled [--seeds 1,2,3]   # root, nginx
    .venv/bin/python -m bench.migration scale [--pages 100000]

``quality`` (``DOCS_TREE``: ``/usr/share/doc/python3.11/html``): for each seed,
``../shared/site/migrate_src.py`` makes a migrated copy of the tree with its truth; both
trees' HTML files are recorded straight into two SQLite stores through the crawl's own
recording functions (``fingerprint_page``, then the record store's writer: what the content
fingerprint thread and the recorder do for a fetched page; no HTTP, no URL variants), as
``http://old.test/PATH`` and ``http://new.test/PATH``; then ``match_sites``. Scored per kind
of change (renamed, edited, merged, removed, decoy): an entry is right when its target is
the truth's new path; precision = right entries / entries, recall = right entries / old
pages that have a new page; removed pages mapped (entries for a page the truth says is
gone).

``crawled``: the same, but both trees built into messy sites by ``build_site.py`` (URL
variants, redirect chains, traps, ``<base href>``), served by nginx inside a loopback-only
network namespace (``isolate.sh``) and crawled with ``scrapy crawl site``; the truth's paths
turned into served URLs by each build's ``truth.json``. ``KEEP=DIR`` keeps the trees and
stores.

``scale``: ``--pages`` synthetic old pages (300 random shingles each, a title) and as many
new ones (each old page renamed, 10% edited, 5% removed and replaced by new pages), written
into two SQLite stores by the store writer, then matched with a progress line; prints the
time to write, read and match.

Prints the figures as JSON on its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from bloom_frontier.content.features import fingerprint_page
from bloom_frontier.content.fingerprint import minhash_of_shingles, signature_bytes
from bloom_frontier.migration.answers import MigrationAnswer
from bloom_frontier.migration.matching import document_url, match_sites
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import ContentRecord, MatchFeatures, PageRecord
from bloom_frontier.pipelines.writer import StoreWriter

ROOT = Path(__file__).resolve().parent.parent
#: ``../shared/site/migrate_src.py`` of the checkout (of the main checkout, for a worktree).
MIGRATE = next(
    (path for up in (ROOT.parent, ROOT.parent.parent)
     if (path := up / "shared" / "site" / "migrate_src.py").exists()),
    ROOT.parent / "shared" / "site" / "migrate_src.py",
)  # fmt: skip
SRC = Path("/usr/share/doc/python3.11/html")


def record_tree(tree: Path, host: str, store_url: str) -> int:
    """Record every HTML file of ``tree`` as a page of ``http://HOST/PATH`` fetched 200."""
    writer = StoreWriter.from_url(store_url, batch_size=500)
    count = 0
    for path in sorted(tree.rglob("*.html")):
        relative = path.relative_to(tree).as_posix()
        url = f"http://{host}/{relative}"
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        page = PageRecord(fetch_url=url, final_url=url, key=None, status=200)
        writer.add_page(page)
        writer.add_fingerprint(page, fingerprint_page(text.encode(), text, 200, None, "n2", url))
        count += 1
    writer.close()
    return count


def score(
    answers: list[MigrationAnswer],
    truth: dict,
    prefixes: tuple[str, str] = ("http://old.test", "http://new.test"),
) -> dict:
    """Precision, recall and removed pages mapped, overall and per kind of change."""
    by_path = {answer.old.removeprefix(prefixes[0]): answer for answer in answers}
    kinds: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for old, expected in truth["map"].items():
        kind = truth["kinds"][old]
        answer = by_path.get(old)
        row = kinds[kind]
        row["pages"] += 1
        row["expected"] += expected is not None
        if answer is None:
            row["unanswered"] += 1
            continue
        row[f"method/{answer.method}"] += 1
        if answer.entry:
            row["entries"] += 1
            got = answer.new.removeprefix(prefixes[1])
            row["right" if got == expected else "wrong"] += 1
            if expected is None:
                row["removed_mapped"] += 1
    total: Counter[str] = Counter()
    for row in kinds.values():
        total.update({key: value for key, value in row.items() if not key.startswith("method/")})
    summary = {
        "precision": round(total["right"] / total["entries"], 4) if total["entries"] else None,
        "recall": round(total["right"] / total["expected"], 4) if total["expected"] else None,
        "removed_mapped": total["removed_mapped"],
        **{key: total[key] for key in ("pages", "expected", "entries", "right", "wrong")},
    }
    return {"summary": summary, "kinds": {kind: dict(row) for kind, row in sorted(kinds.items())}}


def quality(seeds: list[int], src: Path) -> dict:
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as work:
        base = Path(work)
        old_url = f"sqlite:///{base / 'old.sqlite'}"
        record_tree(src, "old.test", old_url)
        for seed in seeds:
            tree, truth_file = base / f"new-{seed}", base / f"truth-{seed}.json"
            subprocess.run(
                [sys.executable, str(MIGRATE), "--src", str(src), "--out", str(tree),
                 "--seed", str(seed), "--truth", str(truth_file)],
                check=True, capture_output=True,
            )  # fmt: skip
            new_url = f"sqlite:///{base / f'new-{seed}.sqlite'}"
            record_tree(tree, "new.test", new_url)
            old, new = StoreReader.from_url(old_url), StoreReader.from_url(new_url)
            started = time.process_time()
            answers = match_sites(old, new)
            elapsed = time.process_time() - started
            old.close()
            new.close()
            result = score(answers, json.loads(truth_file.read_text()))
            result["summary"]["match_cpu_s"] = round(elapsed, 2)
            results[seed] = result
            print(f"seed {seed}: {json.dumps(result['summary'])}", file=sys.stderr)
            for kind, row in result["kinds"].items():
                print(f"  {kind}: {json.dumps(row)}", file=sys.stderr)
    return results


def crawled(seeds: list[int], src: Path) -> dict:
    """Both trees built into messy sites (``build_site.py``: URL variants, redirect chains,
    traps), served by nginx on 127.0.0.1:8081 and :8082 inside a loopback-only network
    namespace (``isolate.sh``), crawled with ``scrapy crawl site``, matched and scored."""
    site = MIGRATE.parent
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-migration-crawl-") as work:
        base = Path(os.environ.get("KEEP", work))
        base.chmod(0o755)  # nginx workers run unprivileged
        scrapy = str(Path(sys.executable).parent / "scrapy")
        for seed in seeds:
            old_out, new_src, new_out = (
                base / f"old-{seed}",
                base / f"src-{seed}",
                base / f"new-{seed}",
            )
            truth_file = base / f"truth-{seed}.json"
            build = [sys.executable, str(site / "build_site.py"), "--seed", str(seed)]
            subprocess.run([*build, "--src", str(src), "--out", str(old_out), "--port", "8081"],
                           check=True, capture_output=True)  # fmt: skip
            subprocess.run(
                [sys.executable, str(MIGRATE), "--src", str(src), "--out", str(new_src),
                 "--seed", str(seed), "--truth", str(truth_file)],
                check=True, capture_output=True,
            )  # fmt: skip
            subprocess.run([*build, "--src", str(new_src), "--out", str(new_out), "--port", "8082"],
                           check=True, capture_output=True)  # fmt: skip
            stores = {name: base / f"{name}-{seed}.sqlite" for name in ("old", "new")}
            serve = '"$S/serve.sh" "$2" 8081 {0}; "$S/serve.sh" "$3" 8082 {0}'
            crawl = (
                '"$6" crawl site -s LOG_LEVEL=WARNING '
                "-a start_url=http://127.0.0.1:{0}/index.html -s STORE_URL=sqlite:///${1}"
            )
            script = (
                f"set -e; S=$1; trap '{serve.format('stop')}' EXIT; "
                f"{serve.format('>/dev/null')}; {crawl.format(8081, 4)}; {crawl.format(8082, 5)}"
            )
            started = time.perf_counter()
            subprocess.run(
                [str(site / "isolate.sh"), "bash", "-c", script, "bench", str(site), str(old_out),
                 str(new_out), str(stores["old"]), str(stores["new"]), scrapy],
                check=True, cwd=ROOT, capture_output=True,
            )  # fmt: skip
            crawl_s = time.perf_counter() - started
            old, new = (StoreReader.from_url(f"sqlite:///{stores[n]}") for n in ("old", "new"))
            started = time.process_time()
            answers = match_sites(old, new)
            elapsed = time.process_time() - started
            old.close()
            new.close()
            ids = {
                side: {document_url(d["url"]): "/" + d["id"] for d in json.loads(
                    (out / "truth.json").read_text())["documents"]}
                for side, out in (("old", old_out), ("new", new_out))
            }  # fmt: skip
            renamed = [
                MigrationAnswer(ids["old"].get(document_url(a.old), a.old),
                                ids["new"].get(document_url(a.new), a.new) if a.new else None,
                                a.confidence, a.method, a.entry)
                for a in answers
            ]  # fmt: skip
            result = score(renamed, json.loads(truth_file.read_text()), prefixes=("", ""))
            result["summary"].update(
                match_cpu_s=round(elapsed, 2),
                crawls_s=round(crawl_s, 1),
                answers=len(answers),
                redirect_answers=sum(a.method == "redirect" for a in answers),
            )
            results[seed] = result
            print(f"seed {seed} (crawled): {json.dumps(result['summary'])}", file=sys.stderr)
            for kind, row in result["kinds"].items():
                print(f"  {kind}: {json.dumps(row)}", file=sys.stderr)
    return results


def _synthetic_features(rng: np.random.Generator, words: np.ndarray, title: str) -> MatchFeatures:
    shingles = np.unique(words.astype(np.uint64) * np.uint64(0x9E3779B1) & np.uint64(0xFFFFFFFF))
    return MatchFeatures(
        title=title,
        headings=(title,),
        main_hash=f"{abs(hash(words.tobytes())):032x}"[:32],
        main_minhash=signature_bytes(minhash_of_shingles(shingles)),
        main_length=len(words),
        main_shingles=len(shingles),
        outlinks=(),
    )


def scale(pages: int) -> dict:
    """Synthetic old and new sites of ``pages`` pages each, written, read and matched."""
    rng = np.random.default_rng(7)
    pyrng = random.Random(7)
    figures: dict[str, float | int] = {"pages": pages}
    with tempfile.TemporaryDirectory(prefix="bench-migration-scale-") as work:
        urls = {side: f"sqlite:///{Path(work) / f'{side}.sqlite'}" for side in ("old", "new")}
        writers = {side: StoreWriter.from_url(url, batch_size=2000) for side, url in urls.items()}
        started = time.perf_counter()
        removed = 0
        for number in range(pages):
            text = rng.integers(0, 1 << 32, 300, dtype=np.uint64)  # shingle-like words
            title = f"Topic {number} {pyrng.choice(['guide', 'notes', 'reference', 'howto'])}"
            pairs = [("old", f"http://old.test/section/{number}.html", text, title)]
            draw = pyrng.random()
            if draw < 0.05:
                removed += 1
                other = rng.integers(0, 1 << 32, 300, dtype=np.uint64)
                pairs.append(
                    ("new", f"http://new.test/n/{number}-fresh/", other, f"Fresh {number}")
                )
            else:
                edited = text.copy()
                if draw < 0.15:
                    edited[rng.integers(0, 300, 15)] = rng.integers(0, 1 << 32, 15)
                pairs.append(("new", f"http://new.test/docs/topic-{number}/", edited, title))
            for side, url, words, name in pairs:
                page = PageRecord(fetch_url=url, final_url=url, key=None, status=200)
                features = _synthetic_features(rng, words, name)
                content = ContentRecord("0" * 32, None, "n2", "ok", features)
                writers[side].add_page(page)
                writers[side].add_fingerprint(page, content)
        for writer in writers.values():
            writer.close()
        figures["write_s"] = round(time.perf_counter() - started, 1)
        old, new = StoreReader.from_url(urls["old"]), StoreReader.from_url(urls["new"])
        started = time.perf_counter()
        cpu = time.process_time()
        answers = match_sites(old, new, lambda line: print(line, file=sys.stderr, flush=True))
        figures["read_and_match_s"] = round(time.perf_counter() - started, 1)
        figures["read_and_match_cpu_s"] = round(time.process_time() - cpu, 1)
        entries = [answer for answer in answers if answer.entry]
        right = sum(
            answer.old.rsplit("/", 1)[1].removesuffix(".html")
            == answer.new.rstrip("/").rsplit("-", 1)[1]
            for answer in entries
        )
        figures.update(
            answers=len(answers), entries=len(entries), right=right, removed=removed,
            methods=dict(Counter(answer.method for answer in answers)),
        )  # fmt: skip
        old.close()
        new.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("quality", "crawled", "scale"))
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--src", type=Path, default=SRC)
    parser.add_argument("--pages", type=int, default=100_000)
    args = parser.parse_args()
    if args.mode == "quality":
        if not (args.src / "index.html").exists():
            raise SystemExit(
                f"error: no docs tree at {args.src} (apt-get install -y python3.11-doc)"
            )
        result = quality([int(seed) for seed in args.seeds.split(",")], args.src)
    elif args.mode == "crawled":
        result = crawled([int(seed) for seed in args.seeds.split(",")], args.src)
    else:
        result = scale(args.pages)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
