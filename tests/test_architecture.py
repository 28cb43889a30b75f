"""The dependency direction of docs/architecture.md: middlewares -> crawler core -> pipelines.

Read from the source files (every ``import`` statement, including those inside functions and
under ``TYPE_CHECKING``), so a new import against the direction fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The package each folder is installed as (pyproject.toml's package-dir).
PACKAGES = {
    "crawler": "bloom_frontier",
    "middlewares": "bloom_frontier.middlewares",
    "pipelines": "bloom_frontier.pipelines",
}
#: Each folder and the packages it must not import.
FORBIDDEN = {
    "crawler": ("bloom_frontier.middlewares",),
    "pipelines": ("bloom_frontier.middlewares",),
}


def package_of(path: Path) -> str:
    """The package ``path`` (a module of one of :data:`PACKAGES`) belongs to."""
    relative = path.relative_to(ROOT)
    return ".".join([PACKAGES[relative.parts[0]], *relative.parts[1:-1]])


def imported_modules(path: Path, package: str = "") -> list[tuple[int, str]]:
    """Every module ``path`` imports, and every name imported from one (as a possible
    submodule), with its line; relative imports resolved against ``package``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found += [(node.lineno, base)]
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def violations(folder: str) -> list[str]:
    forbidden = FORBIDDEN[folder]
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, module in imported_modules(path, package_of(path))
        if any(module == name or module.startswith(name + ".") for name in forbidden)
    ]


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_the_core_and_the_records_never_import_middlewares(folder: str) -> None:
    assert violations(folder) == []


def test_the_scan_finds_such_an_import(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from bloom_frontier.middlewares.redirects import key_or_error\n"
        "def late():\n"
        "    import bloom_frontier.middlewares.ssrf\n"
        "from bloom_frontier import middlewares\n"
        "from ..middlewares import linkbatch\n"
    )
    found = {name for _, name in imported_modules(module, "bloom_frontier.frontier")}
    assert {name for name in found if "middlewares" in name} == {
        "bloom_frontier.middlewares.redirects",
        "bloom_frontier.middlewares.redirects.key_or_error",
        "bloom_frontier.middlewares",
        "bloom_frontier.middlewares.ssrf",
        "bloom_frontier.middlewares.linkbatch",
    }
