"""The oldest versions the project declares, as a pip constraints file (``make test-min``).

``python tests/lower_bounds.py`` prints one ``name==version`` line for each ``>=`` bound of
pyproject.toml's dependencies and of every extra but ``test`` (the suite's own tools, which
are not the package's requirements); ``--check`` exits non-zero, naming them, when the
installed versions of those packages are not exactly these. Standard library only: it runs
before any virtualenv exists.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
#: ``name[extras]>=version`` with anything after (other bounds, markers).
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+)")
#: Extras that are the suite's tools, not what the package needs.
TOOL_EXTRAS = ("test",)


def declared_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    """Every requirement of the package: its dependencies and its extras but :data:`TOOL_EXTRAS`."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra, extra_requirements in project.get("optional-dependencies", {}).items():
        if extra not in TOOL_EXTRAS:
            requirements += extra_requirements
    return requirements


def lower_bounds(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """``{distribution name: oldest declared version}``; a requirement without a ``>=`` bound
    is refused, so that no dependency escapes the oldest-versions run."""
    bounds = {}
    for requirement in declared_requirements(pyproject):
        match = _REQUIREMENT.match(requirement)
        if match is None:
            raise ValueError(f"{requirement!r} in {pyproject.name} has no '>=' lower bound")
        bounds[match.group(1).lower()] = match.group(2)
    return bounds


def _release(version: str) -> tuple[str, ...]:
    """``version`` without trailing ``.0`` parts: ``5.0`` and ``5.0.0`` name one release."""
    parts = version.split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return tuple(parts)


def mismatches(bounds: dict[str, str]) -> list[str]:
    """The packages whose installed version is not their bound, as ``name X (bound Y)``."""
    found = []
    for name, version in bounds.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        if _release(installed) != _release(version):
            found.append(f"{name} {installed} (bound {version})")
    return found


def main(argv: list[str]) -> int:
    bounds = lower_bounds()
    if argv == ["--check"]:
        wrong = mismatches(bounds)
        if wrong:
            print("error: not the declared lower bounds: " + ", ".join(wrong), file=sys.stderr)
            return 1
        print(f"{len(bounds)} dependencies at their declared lower bounds")
        return 0
    sys.stdout.writelines(f"{name}=={version}\n" for name, version in bounds.items())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
