"""Every name a bench/ or dev/ script imports from tuneproof exists (the benches run in `make bench`,
not in the suite, so a rename would otherwise break them unseen)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPTS = sorted([*(ROOT / "bench").glob("*.py"), *(ROOT / "dev").glob("*.py")])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_imported_name_exists(script: Path) -> None:
    missing = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tuneproof"):
            module = importlib.import_module(node.module)
            missing += [f"{node.module}.{a.name}" for a in node.names if not _has(module, a.name)]
    assert missing == []


def _has(module: object, name: str) -> bool:
    """`from package import name` finds an attribute or a submodule (imported or not yet)."""
    if hasattr(module, name):
        return True
    try:
        importlib.import_module(f"{module.__name__}.{name}")  # type: ignore[attr-defined]
    except ImportError:
        return False
    return True
