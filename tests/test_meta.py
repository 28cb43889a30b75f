"""One module of ``request.meta`` keys (``bloom_frontier.meta``): defined there only, each key
once, so that no component spells a key another reads under a different name."""

from __future__ import annotations

import ast
from pathlib import Path

import bloom_frontier.meta as meta

ROOT = Path(__file__).resolve().parent.parent


def is_meta_name(name: str) -> bool:
    """A name the project gave (or gives) a meta key: ``X_META``, ``META_X``, ``X_META_KEY``."""
    return name.endswith(("_META", "_META_KEY")) or name.startswith("META_")


def test_meta_keys_are_defined_in_the_meta_module_only() -> None:
    elsewhere = []
    for folder in ("crawler", "middlewares", "pipelines"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "crawler" / "meta.py":
                continue
            for node in ast.parse(path.read_text()).body:
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)
                ):
                    elsewhere += [
                        f"{path.relative_to(ROOT)}:{node.lineno} {target.id}"
                        for target in node.targets
                        if isinstance(target, ast.Name) and is_meta_name(target.id)
                    ]
    assert elsewhere == []


def test_each_key_has_one_name() -> None:
    keys = {name: getattr(meta, name) for name in dir(meta) if name.endswith("_META")}
    assert len(set(keys.values())) == len(keys)
    assert all(name == f"{key.upper()}_META" for name, key in keys.items())
