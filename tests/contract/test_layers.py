"""The layers of the code (docs/contributing.md), top to bottom:

    cli > integrations > commands > measure, gate, ship, train, preflight, memory
        > flops, data, attention, labels > arch, trace, hardware, runs > core  (tests/layers.py)

A module imports only from its own layer or below, packages import each other in no cycle, and no
module imports another module's private name. Every import counts: at the top, inside a function (to
delay a heavy dependency) and under TYPE_CHECKING. A new package must be given its layer here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from layers import LAYER, LAYERS

SRC = Path(__file__).resolve().parent.parent.parent / "src" / "tuneproof"
TOP = ("__init__", "__main__")  # the package's front door and `python -m tuneproof`: above every layer


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


def _dataclass_decorators(node: ast.ClassDef) -> list[ast.expr]:
    """`@dataclass`, `@dataclass(...)` and `@dataclasses.dataclass(...)` on `node`."""
    found = []
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            found.append(d)
    return found


def test_every_dataclass_of_four_or_more_fields_is_keyword_only() -> None:
    """The rule of the specs, for every record of four or more fields (its own annotations, ClassVar
    aside): built by position, two swapped fields of one type pass silently, and a field added or moved
    shifts every caller's arguments without a word."""
    positional = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or not (decorators := _dataclass_decorators(node)):
                continue
            fields = [
                n
                for n in node.body
                if isinstance(n, ast.AnnAssign)
                and isinstance(n.target, ast.Name)
                and "ClassVar" not in ast.unparse(n.annotation)
            ]
            keyword_only = any(
                isinstance(d, ast.Call)
                and any(
                    k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in d.keywords
                )
                for d in decorators
            )
            if len(fields) >= 4 and not keyword_only:
                positional.append(f"{m}.{node.name}")
    assert positional == []


def test_no_two_classes_share_a_name() -> None:
    homes: dict[str, list[str]] = defaultdict(list)
    for m, node in _classes():
        homes[node.name].append(m)
    assert {name: ms for name, ms in homes.items() if len(ms) > 1} == {}


# One home per concept: the definition, and the code shapes that would be a second copy of it.
HOMES = {
    "tuneproof.core.dtypes": (
        "DTYPES",
        "MODEL_DTYPES",
        "PEAK_DTYPES",
        "PEAK_ALIASES",
        "SAFETENSORS_BITS",
        "normalise_dtype",
    ),
    "tuneproof.core.quantiles": ("t_quantile",),
    "tuneproof.hardware.capability": ("KNOWN_CAPABILITIES", "SMEM_FLOOR", "parse_capability", "smem_limit"),
    "tuneproof.hardware.gpus": ("GPUS", "GpuSpec"),
    "tuneproof.hardware.card": ("Card", "card", "of_capability", "of_trace"),
    "tuneproof.arch.targets": (
        "peft_matches",
        "pattern_value",
        "LoraTargets",
        "Adaptation",
        "adaptation",
        "resolve_names",
        "MOE_PATTERN",
        "PEFT_MAMBA_TYPES",
        "parameter_path",
    ),
    "tuneproof.gate.metrics": ("METRIC_FAMILIES", "MetricFamily"),
    "tuneproof.attention.paths": ("PATHS",),
    "tuneproof.runs.implementations": ("implementation", "Implementation"),
    "tuneproof.runs.axolotl": ("AXOLOTL_PAD_MULTIPLE",),
    "tuneproof.runs.axolotl_packing": ("PackingIsolation", "packing_isolation"),
    "tuneproof.arch.inventory": ("Inventory", "inventory"),
    "tuneproof.runs.run": (
        "Run",
        "DatasetRef",
        "PACKS_ROWS",
        "attn_base",
        "auto_attention",
        "ledger_optimizer",
    ),
    "tuneproof.runs.step": (
        "Step",
        "Rows",
        "ATTENTION_PATHS",
        "PRICED_PATHS",
        "UNKNOWN_PATH",
        "attention_path_name",
    ),
}
# How a step trains: Step's fields. A dataclass that holds several of them is a second run type,
# unless it is a command's Spec (its user's input, turned into a Step by the command).
STEP_FIELDS = {
    "attn",
    "mode",
    "lora_rank",
    "lora_targets",
    "lora_target_parameters",
    "grad_ckpt",
    "seq_len",
    "batch",
    "padded",
    "packed",
    "compiled",
    "training",
}
DTYPE_NAMES = {"bf16", "fp16", "fp32", "bfloat16", "float16", "float32", "f16", "f32", "f64", "i8", "u8"}


def _top_level_names(module: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(MODULES[module].read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_each_concept_is_defined_in_its_home_alone() -> None:
    defined = {m: _top_level_names(m) for m in MODULES}
    for home, names in HOMES.items():
        for name in names:
            assert name in defined[home], f"{name} left {home}"
            others = [m for m, ns in defined.items() if name in ns and m != home]
            assert others == [], f"{name} is defined again in {others} (its home is {home})"


def _fields(node: ast.ClassDef) -> set[str]:
    return {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def test_one_run_type_and_one_step_type() -> None:
    """The run is `runs.run.Run` and its step `runs.step.Step`, both frozen; no class outside `runs/`
    carries a copy of how the step trains: a command's spec, the probe and the explainer's context hold a
    Step or a Run instead (issue 47: ProbeSpec and dispatch.Context kept their own copies)."""
    copies = [
        f"{m}.{node.name}"
        for m, node in _classes()
        if not m.startswith("tuneproof.runs.") and len(STEP_FIELDS & _fields(node)) >= 3
    ]
    assert copies == []
    loose = [
        f"{m}.{node.name}"
        for m, node in _classes()
        if m.startswith("tuneproof.runs.")
        and not any("frozen=True" in ast.unparse(d) for d in node.decorator_list)
    ]
    assert loose == []


def _calls(name: str) -> list[str]:
    """module:line of every call of `name` (a plain call or an attribute's)."""
    found = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called == name:
                    found.append(f"{m}:{node.lineno}")
    return found


def test_one_step_constructor() -> None:
    """A step is built in one place, `Run.step()`: every reader (flags, a recipe, an Axolotl YAML, a
    Trainer's model) makes a Run, and the Run makes its steps."""
    built = [c for c in _calls("Step") + _calls("RunSpec") if not c.startswith("tuneproof.runs.run:")]
    assert built == []


def test_one_card_table() -> None:
    """Every fact about a card by its name (peaks, capability, shared memory, memory) is a row of
    `hardware/gpus.py`; a mapping keyed by GPU names anywhere else is a second table (issue 47:
    memory/cards.CAPACITY was one)."""
    from tuneproof.hardware.gpus import GPUS

    names = {g.name for g in GPUS} | {a for g in GPUS for a in g.aliases}
    copies = [
        f"{m}:{node.lineno}"
        for m, path in MODULES.items()
        if m != "tuneproof.hardware.gpus"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Dict)
        and sum(isinstance(k, ast.Constant) and k.value in names for k in node.keys) >= 2
    ]
    assert copies == []


def test_one_t_quantile() -> None:
    """Student's t two-sided quantile is `core.quantiles.t_quantile` alone (issue 47: a table in the
    adjudicator and two functions, in the gate and the fit, were three)."""
    copies = [
        f"{m}:{node.lineno}"
        for m, path in MODULES.items()
        if m != "tuneproof.core.quantiles"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "ppf"
        and node.args
        and ("/ 2" in ast.unparse(node.args[0]) or "0.975" in ast.unparse(node.args[0]))
    ]
    assert copies == []
    tables = [
        f"{m}:{node.lineno}"
        for m, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Tuple)
        and len(node.elts) > 5
        and [getattr(e, "value", None) for e in node.elts[:2]] == [12.706, 4.303]
    ]
    assert tables == []


def test_a_gate_metric_is_registered_once() -> None:
    """A gate family's name is spelled in `gate/metrics.py` alone; every other module reads the record
    (issue 47: a metric's name was written in four files)."""
    from tuneproof.gate.metrics import METRIC_FAMILIES

    spelled = [
        f"{m}:{node.lineno}"
        for m, path in MODULES.items()
        if m != "tuneproof.gate.metrics"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in METRIC_FAMILIES
    ]
    assert spelled == []


def test_the_path_records_are_the_step_s_path_names() -> None:
    from tuneproof.attention.paths import PATHS
    from tuneproof.runs.step import PRICED_PATHS

    assert tuple(PATHS) == PRICED_PATHS


def _dtype_table(node: ast.AST) -> bool:
    """A literal tuple, list or set of dtype names, a dict mapping them to other names, or a dict mapping
    them to whole numbers (sizes, bits): a copy of the dtype table, whatever its names' spelling
    (`bf16`, `bfloat16`, `BF16`). A dict of fractional numbers per dtype (a GPU row's peaks) is data
    about dtypes, not a copy."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
    elif isinstance(node, ast.Dict) and all(
        isinstance(v, ast.Constant) and (isinstance(v.value, str) or type(v.value) is int)
        for v in node.values
    ):
        values = [k.value for k in node.keys if isinstance(k, ast.Constant)]
    else:
        return False
    names = {v.lower() for v in values if isinstance(v, str)}
    return len(DTYPE_NAMES.intersection(names)) >= 2


def test_no_module_but_the_dtype_table_lists_dtypes() -> None:
    copies = [
        f"{m}:{node.lineno}"
        for m, path in MODULES.items()
        if m != "tuneproof.core.dtypes"
        for node in ast.walk(ast.parse(path.read_text()))
        if _dtype_table(node)
    ]
    assert copies == []


def test_no_module_but_the_matcher_matches_peft_targets() -> None:
    """PEFT's rule (the full path or a '.'-suffix) is written once, in arch/targets.py."""
    copies = [
        m
        for m, path in MODULES.items()
        if m != "tuneproof.arch.targets" and 'endswith("." +' in path.read_text().replace("'", '"')
    ]
    assert copies == []


def test_every_verb_is_a_command_module_with_prepare_and_run() -> None:
    """`tuneproof X` is `tuneproof.commands.X`: its spec, `prepare` and `run(plan, progress)`, and no
    second door (`run_x`, `x(...)` doing both) beside them."""
    from tuneproof.cli.app import app

    missing = []
    for verb in app.commands:
        module = f"tuneproof.commands.{verb.replace('-', '_')}"
        names = _top_level_names(module) if module in MODULES else set()
        if not {"prepare", "run"} <= names:
            missing.append(verb)
    assert missing == []
    verbs = {verb.replace("-", "_") for verb in app.commands}
    doors = [
        f"{m}.{n}" for m in MODULES for n in _top_level_names(m) if n.startswith("run_") and n[4:] in verbs
    ]
    assert doors == []


def test_every_command_is_prepare_of_a_spec_and_run_of_a_plan_with_progress() -> None:
    """One contract: `prepare(spec)` (the spec holds the model, the output, everything) and
    `run(plan, progress=None, *extra)`: the second parameter is the one `Progress`, defaulting to None."""
    from tuneproof.cli.app import app

    odd = []
    for verb in app.commands:
        module = f"tuneproof.commands.{verb.replace('-', '_')}"
        tree = ast.parse(MODULES[module].read_text())
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        prepare, run = defs["prepare"].args, defs["run"].args
        if len(prepare.args) != 1 or prepare.defaults or prepare.kwonlyargs:
            odd.append(f"{verb}: prepare({', '.join(a.arg for a in prepare.args)})")
        progress = run.args[1] if len(run.args) > 1 else None
        typed = progress is not None and progress.annotation is not None
        if not typed or "Progress | None" not in ast.unparse(progress.annotation):  # type: ignore[union-attr]
            odd.append(f"{verb}: run's second parameter is not `progress: Progress | None`")
    assert odd == []


def test_the_tests_mirror_the_source_and_keep_out_of_the_fixtures() -> None:
    """tests/<package>/ per package (data/'s in tests/batching/), none in tests/data/: pytest would put the
    fixture folder on sys.path, where tests/data/axolotl/ then reads as an installed Axolotl."""
    tests = SRC.parent.parent / "tests"
    assert sorted(p.name for p in (tests / "data").rglob("test_*.py")) == []
    folders = {p.parent.name for p in tests.rglob("test_*.py")} - {"contract", "batching"}
    assert folders <= set(LAYER), sorted(folders - set(LAYER))
