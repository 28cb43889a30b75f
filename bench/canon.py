"""Dedupe key vs w3lib's canonicalize_url vs Scrapy's request fingerprint, in one run.

Generates a deterministic corpus of distinct "original" URLs plus equivalent variants of them
(tracking parameters, parameter order, host case, default port, fragment, dot-segments,
percent-escape spelling, IDN Unicode vs punycode, ``//``, ``;jsessionid=``, provider share
links, share-widget tokens pasted on any host), each variant labelled with its original's id.
For every method it prints µs/URL, the share of variants that get their original's key, and
false merges (keys shared by URLs of different originals), then the speed ratios against
``canonicalize_url``. Times are CPU time of the fastest of ``--rounds`` interleaved passes.

    .venv/bin/python -m bench.canon [--urls 120000] [--variant-share 0.3] [--seed 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import random
import string
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import idna
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter
from w3lib.url import canonicalize_url

from bloom_frontier.canonical import InvalidURL, canonicalize, dedupe_key

TARGET_SPEEDUP = 4.0
TARGET_COLLAPSED = 0.995

WORDS = tuple(
    [
        "library",
        "docs",
        "news",
        "blog",
        "article",
        "page",
        "guide",
        "tutorial",
        "reference",
        "api",
        "shop",
        "product",
        "item",
        "category",
        "search",
        "archive",
        "2024",
        "2025",
        "about",
        "contact",
        "help",
        "faq",
        "release",
        "notes",
        "howto",
        "python",
        "index",
        "download",
        "install",
        "config",
        "user",
        "team",
        "events",
        "press",
        "careers",
        "story",
        "video",
        "photos",
    ]
)
PARAM_NAMES = ("page", "id", "q", "sort", "lang", "letter", "p", "ref", "s", "source", "view")
IDN_LABELS = ("bücher", "münchen", "café", "straße-und-weg", "пример", "例え", "ελληνικά")
TLDS = ("com", "org", "net", "de", "io", "co.uk", "example")
TRACKING = (
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "fbclid",
    "gclid",
    "mc_cid",
    "mc_eid",
    "msclkid",
    "_hsenc",
    "yclid",
)
YOUTUBE_LAST = "AEIMQUYcgkosw048"
B64URL = string.ascii_letters + string.digits + "-_"


@dataclass(frozen=True)
class Link:
    """One corpus URL: ``original`` is the id of the original it is (a variant of)."""

    url: str
    original: int
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Parts:
    scheme: str
    host: str
    unicode_host: str | None
    path: str
    params: tuple[str, ...]

    def url(self, host: str | None = None, path: str | None = None, params=None) -> str:
        query = "&".join(self.params if params is None else params)
        return f"{self.scheme}://{host or self.host}{self.path if path is None else path}" + (
            f"?{query}" if query else ""
        )


def make_hosts(rng: random.Random, count: int) -> list[tuple[str, str | None]]:
    """(ASCII host, Unicode form or None): about 5% internationalized."""
    hosts: set[tuple[str, str | None]] = set()
    while len(hosts) < count:
        tld = rng.choice(TLDS)
        if rng.random() < 0.05:
            label = f"{rng.choice(IDN_LABELS)}{rng.randrange(100)}"
            unicode_host = f"{rng.choice(['', 'www.'])}{label}.{tld}"
            # UTS #46 non-transitional, as browsers (WHATWG): "ß" stays "ß", not "ss".
            hosts.add((idna.encode(unicode_host, uts46=True).decode("ascii"), unicode_host))
        else:
            prefix = rng.choice(["", "www.", "docs.", "m."])
            hosts.add((f"{prefix}{rng.choice(WORDS)}{rng.randrange(1000)}.{tld}", None))
    return sorted(hosts, key=str)


def make_path(rng: random.Random) -> str:
    segments = [rng.choice(WORDS) for _ in range(rng.randrange(1, 4))]
    roll = rng.random()
    if roll < 0.15:
        segments[-1] = segments[-1].capitalize()  # path case matters
    elif roll < 0.2:
        segments[-1] += "-caf%C3%A9"  # an escape that must stay an escape
    leaf = rng.random()
    if leaf < 0.4:
        segments.append(f"{rng.choice(WORDS)}-{rng.randrange(100_000)}.html")
    elif leaf < 0.6:
        segments.append(f"{rng.randrange(10**6)}")
    path = "/" + "/".join(segments)
    return path + "/" if rng.random() < 0.3 else path


def make_originals(rng: random.Random, count: int) -> list[Parts]:
    hosts = make_hosts(rng, max(50, count // 200))
    scheme_of = {host: rng.choice(["http", "https", "https"]) for host, _ in hosts}
    seen: set[tuple] = set()
    originals: list[Parts] = []
    while len(originals) < count:
        roll = rng.random()
        if roll < 0.02:
            video = "".join(rng.choice(B64URL) for _ in range(10)) + rng.choice(YOUTUBE_LAST)
            parts = Parts("https", "www.youtube.com", None, "/watch", (f"v={video}",))
        elif roll < 0.03:
            user = rng.choice(WORDS)
            parts = Parts(
                "https", "twitter.com", None, f"/{user}/status/{rng.randrange(10**12)}", ()
            )
        else:
            host, unicode_host = rng.choice(hosts)
            params: tuple[str, ...] = ()
            if rng.random() < 0.4:
                names = rng.sample(PARAM_NAMES, rng.randrange(1, 4))
                params = tuple(f"{name}={rng.choice(WORDS)}{rng.randrange(50)}" for name in names)
            parts = Parts(scheme_of[host], host, unicode_host, make_path(rng), params)
        identity = (parts.scheme, parts.host, parts.path, tuple(sorted(parts.params)))
        if identity not in seen:
            seen.add(identity)
            originals.append(parts)
    return originals


def escape(rng: random.Random, char: str) -> str:
    code = f"{ord(char):02x}"
    return "%" + "".join(c.upper() if rng.random() < 0.5 else c for c in code)


@dataclass
class Spelling:
    """A variant being built: the original's parts as a link might spell them."""

    original: Parts
    host: str
    port: str = ""
    path: str = ""
    params: list[str] = field(default_factory=list)
    fragment: str = ""
    whole: str | None = None  # a provider share link replacing everything

    def url(self) -> str:
        if self.whole is not None:
            return self.whole
        query = "&".join(self.params)
        return (
            f"{self.original.scheme}://{self.host}{self.port}{self.path}"
            + (f"?{query}" if query else "")
            + self.fragment
        )


# A transformation changes the spelling in place; False when it does not apply.
def v_tracking(rng: random.Random, v: Spelling) -> bool:
    for name in rng.sample(TRACKING, rng.randrange(1, 4)):
        value = f"{rng.choice(WORDS)}{rng.randrange(9)}"
        v.params.insert(rng.randrange(len(v.params) + 1), f"{name}={value}")
    return True


def v_order(rng: random.Random, v: Spelling) -> bool:
    if len(v.params) < 2:
        return False
    before = list(v.params)
    while v.params == before:
        rng.shuffle(v.params)
    return True


def v_host_case(rng: random.Random, v: Spelling) -> bool:
    host = "".join(c.upper() if rng.random() < 0.5 else c for c in v.host)
    changed, v.host = host != v.host, host
    return changed


def v_default_port(rng: random.Random, v: Spelling) -> bool:
    v.port = ":80" if v.original.scheme == "http" else ":443"
    return True


def v_fragment(rng: random.Random, v: Spelling) -> bool:
    v.fragment = "#" + rng.choice(WORDS)
    return True


def v_dot_segments(rng: random.Random, v: Spelling) -> bool:
    segments = v.path.split("/")
    segments.insert(rng.randrange(1, len(segments)), rng.choice([".", f"{rng.choice(WORDS)}/.."]))
    v.path = "/".join(segments)
    return True


def v_escape(rng: random.Random, v: Spelling) -> bool:
    if "%C3%A9" in v.path and rng.random() < 0.5:
        v.path = v.path.replace("%C3%A9", "%c3%a9")
        return True
    inside_escapes = {i + k for i, c in enumerate(v.path) if c == "%" for k in (1, 2)}
    positions = [
        i for i, c in enumerate(v.path) if (c.isalnum() or c in "-._~") and i not in inside_escapes
    ]
    if not positions:
        return False
    i = rng.choice(positions)
    v.path = v.path[:i] + escape(rng, v.path[i]) + v.path[i + 1 :]
    return True


def v_idn(rng: random.Random, v: Spelling) -> bool:
    if v.original.unicode_host is None:
        return False
    v.host = v.original.unicode_host
    return True


def v_slashes(rng: random.Random, v: Spelling) -> bool:
    i = rng.choice([i for i, c in enumerate(v.path) if c == "/"])
    v.path = v.path[:i] + "/" * rng.randrange(2, 4) + v.path[i + 1 :]
    return True


def v_jsessionid(rng: random.Random, v: Spelling) -> bool:
    if v.path.endswith("/"):
        return False
    v.path += ";jsessionid=" + "".join(rng.choice("0123456789ABCDEF") for _ in range(32))
    return True


def v_shaped(rng: random.Random, v: Spelling) -> bool:
    """A share widget's token on any host: ``si=`` (YouTube) or ``ref_src=twsrc^`` (Twitter)."""
    if rng.random() < 0.5:
        token = "si=" + "".join(rng.choice(B64URL) for _ in range(16))
    else:
        token = "ref_src=twsrc%5E" + rng.choice(["tfw", "google%7Ctwcamp%5Eserp%7Ctwgr%5Eauthor"])
    v.params.insert(rng.randrange(len(v.params) + 1), token)
    return True


def v_share(rng: random.Random, v: Spelling) -> bool:
    """The provider's own share-link spellings."""
    o = v.original
    if o.host == "www.youtube.com":
        video = o.params[0][2:]
        token = "".join(rng.choice(B64URL) for _ in range(16))
        v.whole = rng.choice(
            [
                f"https://youtu.be/{video}?si={token}",
                f"https://m.youtube.com/watch?v={video}&feature=share",
                f"https://www.youtube.com/watch?app=desktop&v={video}&list=RD{video}",
            ]
        )
        return True
    if o.host == "twitter.com":
        v.params = rng.choice([["ref_src=twsrc%5Etfw"], ["s=20", "t=x1"]])
        return True
    return False


VARIANTS: dict[str, Callable[[random.Random, Spelling], bool]] = {
    "tracking": v_tracking,
    "order": v_order,
    "host-case": v_host_case,
    "default-port": v_default_port,
    "fragment": v_fragment,
    "dot-segments": v_dot_segments,
    "escape": v_escape,
    "idn": v_idn,
    "slashes": v_slashes,
    "jsessionid": v_jsessionid,
    "share": v_share,
    "shaped": v_shaped,
}


#: Not stacked: ``/a///../b`` is ``/b`` for nginx (slashes merged first) but ``/a/b`` after
#: RFC 3986 dot removal, which is also what browsers and our fetch URL request.
SERVER_DEPENDENT = {"dot-segments", "slashes"}


def make_variant(rng: random.Random, o: Parts) -> tuple[str, tuple[str, ...]] | None:
    """One transformation, or two stacked (30%), e.g. tracking parameters + host case."""
    spelling = Spelling(o, o.host, path=o.path, params=list(o.params))
    kinds = rng.sample(sorted(VARIANTS), 2 if rng.random() < 0.3 else 1)
    if set(kinds) == SERVER_DEPENDENT:
        kinds = kinds[:1]
    applied = tuple(kind for kind in kinds if VARIANTS[kind](rng, spelling))
    url = spelling.url()
    return (url, applied) if applied and url != o.url() else None


def make_corpus(size: int, variant_share: float, seed: int) -> list[Link]:
    rng = random.Random(seed)
    originals = make_originals(rng, round(size * (1 - variant_share)))
    links = [Link(o.url(), i) for i, o in enumerate(originals)]
    wanted = size - len(links)
    while wanted:
        i = rng.randrange(len(originals))
        made = make_variant(rng, originals[i])
        if made:
            links.append(Link(made[0], i, made[1]))
            wanted -= 1
    rng.shuffle(links)
    return links


_fingerprinter = RequestFingerprinter()


def scrapy_fingerprint(url: str) -> bytes:
    return _fingerprinter.fingerprint(Request(url))


METHODS: dict[str, Callable[[str], object]] = {
    "dedupe_key": dedupe_key,
    "canonicalize (stage 1 only)": canonicalize,
    "w3lib canonicalize_url": canonicalize_url,
    "scrapy fingerprint": scrapy_fingerprint,
}


def timed_keys(method: Callable[[str], object], urls: Sequence[str]) -> tuple[float, list]:
    """(CPU seconds, keys) for one pass; an exception becomes a unique key (never a merge).

    CPU time of this process, not wall time, so other load on the machine skews less.
    """
    keys: list = []
    append = keys.append
    gc.collect()
    start = time.process_time()
    for url in urls:
        try:
            append(method(url))
        except (InvalidURL, ValueError) as error:
            append(error)
    return time.process_time() - start, keys


@dataclass
class Quality:
    collapsed: float
    false_merges: int
    errors: int
    by_kind: dict[str, float]


def quality(links: Sequence[Link], keys: Sequence[object]) -> Quality:
    original_key: dict[int, object] = {}
    for link, key in zip(links, keys, strict=True):
        if not link.kinds:
            original_key[link.original] = key
    owners: dict[object, set[int]] = defaultdict(set)
    errors = 0
    hits: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for link, key in zip(links, keys, strict=True):
        if isinstance(key, Exception):
            errors += 1
            continue
        owners[key].add(link.original)
        if link.kinds:
            same = key == original_key[link.original]
            for kind in (*link.kinds, "all"):
                totals[kind] += 1
                hits[kind] += same
    return Quality(
        collapsed=hits["all"] / totals["all"],
        false_merges=sum(len(ids) - 1 for ids in owners.values()),
        errors=errors,
        by_kind={kind: hits[kind] / totals[kind] for kind in sorted(totals) if kind != "all"},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=120_000)
    parser.add_argument("--variant-share", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="timed passes; the fastest counts")
    args = parser.parse_args(argv)

    links = make_corpus(args.urls, args.variant_share, args.seed)
    urls = [link.url for link in links]
    variants = sum(1 for link in links if link.kinds)
    print(
        f"corpus: {len(urls)} URLs, {len(urls) - variants} originals, {variants} variants "
        f"({variants / len(urls):.0%}), seed {args.seed}; Python {sys.version.split()[0]}"
    )

    seconds: dict[str, list[float]] = defaultdict(list)
    results: dict[str, Quality] = {}
    for _ in range(args.rounds):  # interleaved, so drift on the machine hits every method
        for name, method in METHODS.items():
            elapsed, keys = timed_keys(method, urls)
            seconds[name].append(elapsed)
            results.setdefault(name, quality(links, keys))

    # The fastest pass: noise from other load only ever adds time.
    micros = {name: min(runs) / len(urls) * 1e6 for name, runs in seconds.items()}
    print(f"\n{'method':30} {'µs/URL':>8} {'collapsed':>10} {'false merges':>13} {'errors':>7}")
    for name in METHODS:
        q = results[name]
        print(
            f"{name:30} {micros[name]:8.2f} {q.collapsed:10.2%} {q.false_merges:13d} {q.errors:7d}"
        )

    kinds = sorted({kind for q in results.values() for kind in q.by_kind})
    print("\nvariants collapsed, by kind:")
    print(f"{'kind':14}" + "".join(f"{name[:22]:>24}" for name in METHODS))
    for kind in kinds:
        print(f"{kind:14}" + "".join(f"{results[name].by_kind[kind]:24.2%}" for name in METHODS))

    reference = micros["w3lib canonicalize_url"]
    speedup = reference / micros["dedupe_key"]
    ours = results["dedupe_key"]
    print("\nspeed vs w3lib canonicalize_url (higher is faster):")
    for name in METHODS:
        print(f"  {name:30} {reference / micros[name]:5.2f}x")
    checks = [
        (
            f"dedupe_key >= {TARGET_SPEEDUP}x faster than canonicalize_url",
            speedup >= TARGET_SPEEDUP,
        ),
        (
            f"dedupe_key collapses >= {TARGET_COLLAPSED:.1%} of variants",
            ours.collapsed >= TARGET_COLLAPSED,
        ),
        ("dedupe_key makes 0 false merges", ours.false_merges == 0),
    ]
    print()
    for label, ok in checks:
        print(f"  [{'PASS' if ok else 'MISS'}] {label}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
