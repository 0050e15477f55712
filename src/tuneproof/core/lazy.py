"""Lazy re-exports for front doors: `import tuneproof.data` stays cheap, the heavy module loads when a
name is first used (so `tuneproof --help` never pays for torch or numpy)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(__getattr__, __dir__) for a package whose `names` map each export to the module defining it."""

    def getattr_(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted(names)

    return getattr_, dir_
