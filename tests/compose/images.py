"""The images the compose stack test runs on, built on this machine with no image registry.

A Debian bookworm base made with ``debootstrap --variant=minbase`` from the Debian mirror apt
uses here, imported with ``docker import`` (kept once made); on it, from the Dockerfiles beside
this module, the stand-ins for the images docker-compose.yml and the project's Dockerfile name:
``python:3.11-slim`` (the Dockerfile's base; a real one already there is left alone), and
``bloom-frontier-test/redis:8`` and ``bloom-frontier-test/postgres:16``, which
tests/compose/override.yml swaps in. Docker's layer cache makes a second build take seconds.

    python -m tests.compose.images      # build what is missing, print the time each took
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import redisbloom_module_path

HERE = Path(__file__).resolve().parent
BASE_IMAGE = "bloom-frontier-test/debian:bookworm"
SUITE = "bookworm"
#: Where the stand-ins carry the name of the image they replace.
STAND_IN_LABEL = "org.bloom-frontier.stand-in"
#: Used when no apt source of this machine names the suite.
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BUILD_TIMEOUT = 900


@dataclass(frozen=True)
class StandIn:
    """An image built from ``HERE / directory``, with ``files`` (name in the context: file on
    this machine) added to its build context."""

    tag: str
    directory: str
    files: dict[str, Path] = field(default_factory=dict)


def machine_ca_bundle() -> Path:
    """The CA bundle pip uses on this machine (its index may sit behind a TLS-inspecting
    proxy that only the machine's own CA certificates vouch for)."""
    named = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    return Path(named or "/etc/ssl/certs/ca-certificates.crt")


def stand_ins() -> list[StandIn]:
    """The stand-ins, in build order."""
    return [
        StandIn("python:3.11-slim", "python", {"ca-certificates.crt": machine_ca_bundle()}),
        StandIn(
            "bloom-frontier-test/redis:8",
            "redis",
            {"redisbloom.so": redisbloom_module_path()},
        ),
        StandIn("bloom-frontier-test/postgres:16", "postgres"),
    ]


def docker(*args: str, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``docker ARGS``, its output captured; a failure raises with the command's last words."""
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"docker {' '.join(args[:3])} ... failed:\n{tail}")
    return result


def image_label(tag: str) -> str | None:
    """The stand-in label of image ``tag`` ("" for an image without it), None if no such image."""
    label = f'{{{{index .Config.Labels "{STAND_IN_LABEL}"}}}}'
    result = subprocess.run(
        ["docker", "image", "inspect", "--format", label, tag],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.stdout.strip().replace("<no value>", "") if result.returncode == 0 else None


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The first URI apt reads :data:`SUITE` from on this machine (one-line ``.list`` files and
    deb822 ``.sources`` files alike)."""
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for paragraph in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", paragraph, flags=re.MULTILINE))
                if SUITE in fields.get("Suites", "").split() and fields.get("URIs"):
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    return DEFAULT_MIRROR


def ensure_base() -> bool:
    """:data:`BASE_IMAGE`, made unless there; True if it had to be made."""
    if image_label(BASE_IMAGE) is not None:
        return False
    with tempfile.TemporaryDirectory(prefix="bloom-frontier-rootfs-", dir="/var/tmp") as work:
        rootfs = Path(work) / "rootfs"
        mirror = debian_mirror()
        result = subprocess.run(
            ["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
        if result.returncode != 0:
            last = (result.stdout + result.stderr).strip().splitlines()[-1:]
            raise RuntimeError(f"debootstrap {SUITE} from {mirror} failed: {last}")
        # Nothing of the build's own downloads in the image.
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        docker("import", "--change", f"LABEL {STAND_IN_LABEL}=debian:{SUITE}", "-", BASE_IMAGE,
               stdin=tar.stdout, timeout=BUILD_TIMEOUT)  # fmt: skip
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrapped tree failed")
    return True


def build(stand_in: StandIn) -> bool:
    """Build ``stand_in`` (cached layers make it quick when nothing changed); False when a real
    image of its name is there, which is then used as it is."""
    if image_label(stand_in.tag) == "":
        return False
    with tempfile.TemporaryDirectory(prefix="bloom-frontier-context-") as context:
        shutil.copytree(HERE / stand_in.directory, context, dirs_exist_ok=True)
        for name, source in stand_in.files.items():
            shutil.copy(source, Path(context) / name)
        # The classic builder: the same on a docker.io engine whatever buildx the client has.
        # The build's network is the host's (no bridge here), for apt and pip.
        env = {**os.environ, "DOCKER_BUILDKIT": "0"}
        docker("build", "--network", "host", "--tag", stand_in.tag, context,
               timeout=BUILD_TIMEOUT, env=env)  # fmt: skip
    return True


def ensure() -> dict[str, float]:
    """Every image built or checked; seconds each took, by image."""
    took: dict[str, float] = {}
    started = time.monotonic()
    ensure_base()
    took[BASE_IMAGE] = time.monotonic() - started
    for stand_in in stand_ins():
        started = time.monotonic()
        build(stand_in)
        took[stand_in.tag] = time.monotonic() - started
    return took


def main() -> int:
    try:
        took = ensure()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"error: the compose stack's images: {exc}", file=sys.stderr)
        return 1
    print("compose stack images ready: " + ", ".join(f"{t} {s:.0f} s" for t, s in took.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
