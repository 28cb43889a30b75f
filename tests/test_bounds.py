"""``make test-min``'s constraints: every declared lower bound, pinned together."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.lower_bounds import PYPROJECT, lower_bounds, mismatches

ROOT = PYPROJECT.parent

PROJECT = """
[project]
name = "p"
dependencies = ["scrapy>=2.18.0", "redis >= 5.3.0, <9", "numpy>=1.26; python_version >= '3.11'"]
[project.optional-dependencies]
postgres = ["psycopg[binary]>=3.1.4"]
test = ["pytest>=8.0", "p[postgres]"]
"""


def test_every_bound_of_the_dependencies_and_extras_but_the_tools(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PROJECT)
    assert lower_bounds(pyproject) == {
        "scrapy": "2.18.0",
        "redis": "5.3.0",
        "numpy": "1.26",
        "psycopg": "3.1.4",
    }


def test_a_dependency_without_a_lower_bound_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PROJECT.replace('"scrapy>=2.18.0"', '"scrapy"'))
    with pytest.raises(ValueError, match=r"'scrapy' in pyproject.toml has no '>=' lower bound"):
        lower_bounds(pyproject)


def test_the_check_names_packages_off_their_bounds() -> None:
    assert mismatches({"pytest": pytest.__version__}) == []
    assert mismatches({"pytest": "1.0"}) == [f"pytest {pytest.__version__} (bound 1.0)"]
    assert mismatches({"no-such-distribution": "1.0"}) == [
        "no-such-distribution missing (bound 1.0)"
    ]


def imported_top_level_modules() -> set[str]:
    """The top-level modules the package's code imports, standard library and itself aside."""
    found = set()
    for folder in ("crawler", "middlewares", "pipelines"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"bloom_frontier", "__future__"}


def test_everything_the_package_imports_is_declared_with_a_bound() -> None:
    """Each import's distribution is a dependency (or an extra) with a lower bound, so
    ``make test-min`` pins it too."""
    declared = set(lower_bounds(PYPROJECT))
    distributions = metadata.packages_distributions()
    undeclared = {
        module: distributions.get(module)
        for module in imported_top_level_modules()
        if not {name.lower() for name in distributions.get(module, [module])} & declared
    }
    assert undeclared == {}


def test_the_makefiles_constraints_are_the_bounds() -> None:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("lower_bounds.py"))],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    pinned = dict(line.split("==") for line in done.stdout.split())
    assert pinned == lower_bounds(PYPROJECT)
