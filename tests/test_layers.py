"""The layers of the code (docs/contributing.md), top to bottom:

    cli > integrations > commands > measure, gate, ship, train, preflight > flops, data, attention
        > arch, trace, hardware, runs > core

A module imports only from its own layer or below, packages import each other in no cycle, and no
module imports another module's private name. Every import counts: at the top, inside a function (to
delay a heavy dependency) and under TYPE_CHECKING. A new package must be given its layer here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "tuneproof"
LAYERS: tuple[tuple[str, ...], ...] = (  # bottom first
    ("core",),
    ("arch", "trace", "hardware", "runs"),
    ("flops", "data", "attention"),
    ("measure", "gate", "ship", "train", "preflight"),
    ("commands",),
    ("integrations",),
    ("cli",),
)
TOP = ("__init__", "__main__")  # the package's front door and `python -m tuneproof`: above every layer
LAYER = {package: i for i, packages in enumerate(LAYERS) for package in packages}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _package(module: str) -> str:
    """`tuneproof.measure.fit` -> measure; `tuneproof` and `tuneproof.__main__` -> their own names."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, name imported from it or None, line) for every import of tuneproof code."""
    path = MODULES[module]
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("tuneproof")]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, (
                f"{module}:{node.lineno}: a relative import (tuneproof imports absolutely)"
            )
            if not (node.module or "").startswith("tuneproof"):
                continue
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append(
                    (sub, None, node.lineno) if sub in MODULES else (node.module, a.name, node.lineno)
                )
    return found


EDGES = {m: _imports(m) for m in MODULES}


def test_every_package_has_a_layer() -> None:
    packages = {_package(m) for m in MODULES} - set(TOP)
    assert packages - set(LAYER) == set(), "give each new package its layer in LAYERS"


def test_imports_go_down_or_sideways() -> None:
    upward = [
        f"{m}:{line} imports {target} ({_package(m)} is below {_package(target)})"
        for m, imports in EDGES.items()
        for target, _, line in imports
        if _package(m) not in TOP and LAYER[_package(m)] < LAYER.get(_package(target), len(LAYERS))
    ]
    assert upward == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as its nodes in order, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for m, imports in EDGES.items():
        for target, _, _ in imports:
            if _package(target) != _package(m):
                graph[_package(m)].add(_package(target))
    assert _cycle(graph) is None


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_module_imports_another_modules_private_name() -> None:
    private = [
        f"{m}:{line} imports {name} from {target}"
        for m, imports in EDGES.items()
        for target, name, line in imports
        if name is not None and name.startswith("_") and not name.startswith("__") and target != m
    ]
    assert private == []


def _classes() -> list[tuple[str, ast.ClassDef]]:
    return [
        (m, node)
        for m, path in MODULES.items()
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef)
    ]


def test_every_spec_is_frozen_and_keyword_only() -> None:
    """torchtitan's rule: a configuration built by position takes two swapped fields of one type silently."""
    loose = []
    for m, node in _classes():
        if not node.name.endswith("Spec"):
            continue
        decorators = [ast.unparse(d) for d in node.decorator_list if "dataclass" in ast.unparse(d)]
        if not decorators or "kw_only=True" not in decorators[0] or "frozen=True" not in decorators[0]:
            loose.append(f"{m}.{node.name}")
    assert loose == []


def test_no_two_classes_share_a_name() -> None:
    homes: dict[str, list[str]] = defaultdict(list)
    for m, node in _classes():
        homes[node.name].append(m)
    assert {name: ms for name, ms in homes.items() if len(ms) > 1} == {}
