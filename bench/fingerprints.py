"""CPU-seconds of content fingerprints per normalization over a corpus of HTML pages.

Fingerprints (:func:`crawler.content.fingerprint.fingerprint`) every ``*.html`` file under
``--root`` (default: the Python docs of Debian's ``python3.11-doc``, ~530 pages of ~95 kB,
the clean site of ``bench/throughput.py``) under each normalization, best of ``--repeat``
passes of process CPU time, and counts distinct exact fingerprints (each page of the docs is
a different document: fewer would be a merge).

    .venv/bin/python -m bench.fingerprints [--root DIR] [--repeat 3]

Figures (2026-12-01, branch i12-fp, the shared 2-CPU machine at load average 2.0-2.3, best
of 3, 530 pages): n1 as before this branch (e21152f's module) 2.21 CPU-s, n1 now 2.06
(MinHash one row per permutation), n2 0.94 CPU-s: 0.43x of before; 530 distinct exact
fingerprints under each. This script's own run, same load: n1 2.08, n2 0.96 (0.46x).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from crawler.content.fingerprint import NORMALIZATIONS, fingerprint

DOCS = Path("/usr/share/doc/python3.11/html")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DOCS)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    pages = [path.read_text(errors="replace") for path in sorted(options.root.rglob("*.html"))]
    if not pages:
        raise SystemExit(f"no *.html under {options.root} (apt-get install -y python3.11-doc)")
    size = sum(map(len, pages)) / len(pages) / 1000
    print(f"{len(pages)} pages of {size:.0f} kB (characters) on average, {options.root}")
    best: dict[str, float] = {}
    distinct: dict[str, int] = {}
    for _ in range(options.repeat):
        for norm in NORMALIZATIONS:
            started = time.process_time()
            exact = {fingerprint(b"", page, norm=norm).exact for page in pages}
            spent = time.process_time() - started
            best[norm] = min(best.get(norm, spent), spent)
            distinct[norm] = len(exact)
    for norm in NORMALIZATIONS:
        print(f"{norm}: {best[norm]:.2f} CPU-s, {distinct[norm]} distinct exact fingerprints")
    n1, n2 = best.get("n1"), best.get("n2")
    if n1 and n2:
        print(f"n2 / n1: {n2 / n1:.2f}x")


if __name__ == "__main__":
    main()
