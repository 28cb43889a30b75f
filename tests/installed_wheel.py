"""The package as users get it: the wheel built from this checkout, installed in a virtualenv
outside it, run with nothing of the checkout on ``sys.path`` (no ``PYTHONPATH``, no
editable install). Every test that runs a user's ``startproject`` project, or the compose
image's commands, uses the session fixture :func:`installed` (a module of tests names this
module in its ``pytest_plugins``).

The wheel is built once per test session, from a copy of the checkout (as ``pip wheel .``
builds it, build isolation included). Its dependencies live in a *base* virtualenv kept
between runs in the system's temporary directory, one per ``pyproject.toml``, Python and set
of installed versions (the running environment's versions are the constraints, so ``make
test-min`` runs the installed wheel on the lower bounds too). Each session gets its own
virtualenv, a hard-linked copy of the base with the wheel installed in it: sessions of other
checkouts sharing a base never see each other's wheel.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
#: What ``pip wheel`` must not see of a developer's checkout (the build backend would pack a
#: stale ``build/`` directory's modules).
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".*_cache",
    ".hypothesis", "*.sqlite*", "jobdir", "out",
)  # fmt: skip
#: The extras installed with the wheel: the compose image's (PostgreSQL store, hiredis).
EXTRAS = "postgres,hiredis"
INSTALL_TIMEOUT = 900
RUN_TIMEOUT = 240
#: A base virtualenv no session used for this long is deleted (its key is stale).
STALE_AFTER = 3 * 24 * 3600
BASE_PREFIX = "bloom-frontier-wheel-base-"
#: Environment variables of this suite that a user's shell does not have.
NOT_THE_USERS = {
    "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT",
    "STORE_URL", "REDIS_URL", "PYTEST_CURRENT_TEST",
}  # fmt: skip


@dataclass(frozen=True)
class Installed:
    """The built wheel and the session's virtualenv it is installed in."""

    wheel: Path
    venv: Path
    #: The environment of every command: the virtualenv's scripts first, no PYTHONPATH.
    env: dict[str, str]
    #: The extras installed with it.
    extras: str = EXTRAS

    @staticmethod
    def build_wheel(source: Path, dist: Path) -> Path:
        """A wheel built from ``source`` as this one was (:func:`build_wheel`)."""
        return build_wheel(source, dist)

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def scrapy(self) -> str:
        return str(self.venv / "bin" / "scrapy")

    def run(
        self, *command: str, cwd: Path, timeout: float = RUN_TIMEOUT, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """``command`` in ``cwd`` with this environment plus ``env``; never raises on failure."""
        return subprocess.run(
            command,
            cwd=cwd,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def popen(
        self, *command: str, cwd: Path, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> subprocess.Popen[str]:
        """``command`` started in ``cwd`` with this environment plus ``env``."""
        return subprocess.Popen(command, cwd=cwd, env={**self.env, **(env or {})}, **kwargs)


def pip(python: Path, *args: str, check: bool = True) -> bool:
    """``python -m pip ARGS``; True if it succeeded (``check``: a failure fails the test).
    Run outside the checkout, without its ``PYTHONPATH``: ``-m`` puts the working directory on
    ``sys.path``, where pip would take the editable install's metadata for the package."""
    env = {name: value for name, value in os.environ.items() if name not in NOT_THE_USERS}
    try:
        result = subprocess.run(
            [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
            cwd=tempfile.gettempdir(),
            env=env,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
    except OSError:  # a kept virtualenv whose python is gone
        assert not check, f"no {python}"
        return False
    assert result.returncode == 0 or not check, f"pip {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result.returncode == 0


def build_wheel(source: Path, dist: Path) -> Path:
    """The wheel ``pip wheel --no-deps`` builds from the project at ``source``, into ``dist``."""
    pip(Path(sys.executable), "wheel", "--no-deps", "-w", str(dist), str(source))
    (wheel,) = dist.glob("*.whl")
    return wheel


def user_env(venv: Path) -> dict[str, str]:
    """This environment as a user's shell with the virtualenv activated has it: nothing that
    points into the checkout or at this suite's services."""
    env = {name: value for name, value in os.environ.items() if name not in NOT_THE_USERS}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def running_versions() -> str:
    """A pip constraints file of this environment's distributions from an index (not the
    package itself, nor anything installed from a path or a URL)."""
    pins = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and dist.read_text("direct_url.json") is None:
            pins.add(f"{name}=={dist.version}")
    return "".join(f"{pin}\n" for pin in sorted(pins))


def base_venv(constraints: str) -> Path:
    """Where the dependencies' virtualenv for this ``pyproject.toml``, Python and
    ``constraints`` is kept between runs."""
    key = hashlib.sha256(
        PYPROJECT.read_bytes() + sys.version.encode() + constraints.encode()
    ).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"{BASE_PREFIX}{key}"


@contextmanager
def locked(base: Path) -> Iterator[None]:
    """``base`` for this session alone (made, checked, copied), not for a pruning one."""
    with open(f"{base}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def prune_stale_bases(keep: Path) -> None:
    """Delete base virtualenvs of other keys that no session used for :data:`STALE_AFTER`
    (each is a few hundred MB); one in use (its lock held) is left alone."""
    for marker in Path(tempfile.gettempdir()).glob(f"{BASE_PREFIX}*/.dependencies-installed"):
        base = marker.parent
        if base == keep or time.time() - marker.stat().st_mtime < STALE_AFTER:
            continue
        with open(f"{base}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(base, ignore_errors=True)


def ensure_base(base: Path, wheel: Path, constraints: str) -> None:
    """Make ``base``, a virtualenv with the wheel's dependencies (and its extras') but not the
    package, unless a working one is there."""
    marker, python = base / ".dependencies-installed", base / "bin" / "python"
    if marker.exists() and pip(python, "--version", check=False):
        return
    # None kept yet, or one that no longer works (half made, partly cleaned away).
    shutil.rmtree(base, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(base)], check=True, timeout=300)
    (base / "constraints.txt").write_text(constraints, encoding="utf-8")
    pip(python, "install", "-c", str(base / "constraints.txt"), f"{wheel}[{EXTRAS}]")
    pip(python, "uninstall", "-y", "bloom-frontier")
    marker.touch()


def clone(base: Path, venv: Path) -> None:
    """``venv``: a copy of ``base`` whose files are hard links (no extra disk, no time), but
    for its scripts, copied with their ``#!`` line pointing at ``venv``'s own python."""

    def link(source: str, destination: str) -> None:
        try:
            os.link(source, destination)
        except OSError:  # another file system
            shutil.copy2(source, destination)

    shutil.copytree(base, venv, symlinks=True, copy_function=link)
    old, new = f"#!{base}/bin/python".encode(), f"#!{venv}/bin/python".encode()
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            content = script.read_bytes()
            script.unlink()  # a new file: the base's, linked, stays as it is
            script.write_bytes(content.replace(old, new, 1) if content.startswith(old) else content)
            shutil.copymode(base / "bin" / script.name, script)


#: Run in the installed virtualenv from an empty directory: where the package comes from.
WHERE_FROM = """
import json, sys, bloom_frontier
print(json.dumps({"package": bloom_frontier.__file__, "path": sys.path}))
"""


def check_off_the_checkout(installed: Installed, empty: Path) -> None:
    """The imported ``bloom_frontier`` is the wheel's, in the virtualenv's site-packages, and
    no ``sys.path`` entry lies in the checkout."""
    result = installed.run(installed.python, "-c", WHERE_FROM, cwd=empty)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    site_packages = installed.venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    assert Path(found["package"]).is_relative_to(site_packages / "site-packages"), found
    assert not [entry for entry in found["path"] if Path(entry).is_relative_to(ROOT)], found


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """This session's wheel, built from a copy of the checkout and installed in the session's
    own virtualenv."""
    started = time.monotonic()
    work = tmp_path_factory.mktemp("installed-wheel")
    shutil.copytree(ROOT, work / "source", ignore=NOT_COPIED)
    wheel = build_wheel(work / "source", work / "dist")
    constraints = running_versions()
    base = base_venv(constraints)
    with locked(base):
        ensure_base(base, wheel, constraints)
        (base / ".dependencies-installed").touch()  # used now: not stale
        clone(base, work / "venv")
    venv = work / "venv"
    pip(venv / "bin" / "python", "install", "--no-deps", str(wheel))
    installed = Installed(wheel, venv, user_env(venv))
    (work / "empty").mkdir()
    check_off_the_checkout(installed, work / "empty")
    prune_stale_bases(keep=base)
    print(f"wheel built and installed in {time.monotonic() - started:.1f} s")
    return installed
