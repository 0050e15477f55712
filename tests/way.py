"""The way a command's values take through the code, traced with `sys.setprofile`.

A reader following a command through the code reads each function once, in the order the command first
calls it. That order, each function's package in place of the function, with repeats in a row folded,
is **the way**: `cli commands arch commands flops arch flops ...`. Two counts say how knotted it is:

- **re-entries**: steps into a package the way has already been in and left (a package entered k times
  counts k - 1);
- **moves up**: steps into a package of a higher layer than the one the way is in
  (`tests/layers.py`): the value went down and must come back up before it goes on.

`core/` is left out (the floor every layer reads: errors, validation, tables), and so are the frames that
are not moves a reader makes: module and class bodies, comprehensions and generator expressions, and
reads of a value (its dunder methods: `__init__`, `__post_init__`, `__eq__`...; its property getters).
`files` are the modules the way entered, `entries` its steps between modules.

    python tests/way.py                      # the three commands of the issue, on the docs' examples
    WAY_DETAIL=1 python tests/way.py flops   # and the way itself, step by step
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from layers import LAYER, LAYERS

SRC = Path(__file__).resolve().parent.parent / "src" / "tuneproof"
LEVEL = {**LAYER, "__init__": len(LAYERS)}  # the package's front door: above every layer
LEFT_OUT = ("core",)

# The docs' examples of the three commands the way is measured on (README, docs/flops.md,
# docs/memory.md, docs/preflight.md).
EXAMPLES: dict[str, list[str]] = {
    "flops": [
        "flops", "--config", "examples/gemma4-26b-a4b-like/config.json", "--seq-len", "16384",
        "--batch", "2", "--mode", "lora", "--grad-ckpt", "--attn", "sdpa", "--step-time", "34.85",
        "--peak-tflops", "315",
    ],
    "memory": [
        "memory", "--config", "tests/data/configs/qwen3-8b.json", "--seq-len", "8192", "--batch", "2",
        "--gpu", "H100",
    ],
    "preflight": ["preflight", "examples/preflight/gemma4-26b-a4b-sdpa.yml", "--gpu", "H100"],
}  # fmt: skip
# What the way was before the run became the spine (issue 47, commit e321e87), on these examples.
BEFORE = {
    "flops": {"reentries": 19, "ups": 10},
    "memory": {"reentries": 24, "ups": 14},
    "preflight": {"reentries": 40, "ups": 19},
}


@dataclass
class Way:
    steps: list[tuple[str, str, str]] = field(default_factory=list)  # (package, module, function) in order

    @property
    def packages(self) -> list[str]:
        out: list[str] = []
        for package, _, _ in self.steps:
            if not out or out[-1] != package:
                out.append(package)
        return out

    @property
    def modules(self) -> list[str]:
        out: list[str] = []
        for _, module, _ in self.steps:
            if not out or out[-1] != module:
                out.append(module)
        return out

    def summary(self) -> dict[str, int]:
        packages = self.packages
        return {
            "files": len(set(self.modules)),
            "entries": len(self.modules),
            "reentries": len(packages) - len(set(packages)),
            "ups": sum(1 for a, b in itertools.pairwise(packages) if LEVEL[b] > LEVEL[a]),
        }

    def entered(self) -> dict[str, int]:
        """How many times the way entered each package."""
        counts: dict[str, int] = {}
        for package in self.packages:
            counts[package] = counts.get(package, 0) + 1
        return counts


def _where(frame: FrameType) -> tuple[str, str, str] | None:
    """(package, module, function) of a tuneproof function's frame, else None."""
    code = frame.f_code
    if not code.co_filename.startswith(str(SRC)) or code.co_name.startswith("<"):
        return None
    if not code.co_flags & 0x2:  # CO_NEWLOCALS: a function, not a module or class body
        return None
    if code.co_name.startswith("__") or _is_property(frame):  # a read, not a move a reader makes
        return None
    rel = Path(code.co_filename).relative_to(SRC)
    package = rel.parts[0] if len(rel.parts) > 1 else "__init__"
    if package in LEFT_OUT:
        return None
    return package, str(rel), code.co_qualname


def _is_property(frame: FrameType) -> bool:
    """The frame runs a property's getter (an attribute read, not a move a reader makes)."""
    owner = frame.f_locals.get("self")
    attr = getattr(type(owner), frame.f_code.co_name, None) if owner is not None else None
    return isinstance(attr, property)


def trace(argv: list[str], root: Path | None = None) -> tuple[Way, int]:
    """The way of `tuneproof argv` run in-process from `root` (the repository), and its exit code."""
    from tuneproof.cli.app import main

    way, seen = Way(), set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        here = _where(frame)
        if here is not None and here[1:] not in seen:
            seen.add(here[1:])
            way.steps.append(here)

    cwd, cache = Path.cwd(), os.environ.get("TUNEPROOF_CACHE")
    os.environ["TUNEPROOF_CACHE"] = tempfile.mkdtemp(prefix="tuneproof-way-")  # a cold model cache
    try:
        os.chdir(root or SRC.parent.parent)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            sys.setprofile(profile)
            try:
                code = main(argv)
            finally:
                sys.setprofile(None)
    finally:
        os.chdir(cwd)
        if cache is None:
            os.environ.pop("TUNEPROOF_CACHE", None)
        else:
            os.environ["TUNEPROOF_CACHE"] = cache
    return way, code


if __name__ == "__main__":
    for name in sys.argv[1:] or list(EXAMPLES):
        found, code = trace(EXAMPLES[name])
        print(name, f"exit {code}", found.summary(), "before", BEFORE[name], found.entered())
        if os.environ.get("WAY_DETAIL"):
            last = None
            for package, module, function in found.steps:
                up = last is not None and package != last and LEVEL[package] > LEVEL[last]
                print(f"  {'^' if up else ' '} {package:10s} {module}:{function}")
                last = package
