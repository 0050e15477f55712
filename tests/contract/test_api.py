"""The public surface is pinned: changing it is a deliberate act."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import tuneproof
import tuneproof.arch
import tuneproof.attention
import tuneproof.data
import tuneproof.flops
import tuneproof.gate
import tuneproof.measure
import tuneproof.ship

SRC = Path(tuneproof.__file__).parent

FRONT_DOORS = {
    tuneproof: [
        "Run",
        "RunSpec",
        "Step",
        "TuneproofCallback",
        "TuneproofError",
        "__version__",
        "flop_report",
        "from_config",
        "lookup_gpu",
        "resolve",
        "resolve_peak",
    ],
    tuneproof.arch: [
        "Attention",
        "AttentionSpec",
        "FAMILIES",
        "Family",
        "Join",
        "LayerShape",
        "Linear",
        "ModelShape",
        "ResolvedModel",
        "SUPPORTED_MODEL_TYPES",
        "Op",
        "TINY",
        "from_config",
        "load_config_dict",
        "resolve",
        "resolve_text_config",
        "tiny_config_path",
    ],
    tuneproof.gate: [
        "Arm",
        "GateReport",
        "GateSpec",
        "MetricResult",
        "PhraseMatcher",
        "build_index",
        "judge_metric",
        "mine",
        "read_arm",
        "read_probes",
        "read_spec",
        "judge_arms",
    ],
    tuneproof.flops: [
        "EFFECTS",
        "Effect",
        "Excess",
        "FlopReport",
        "Ledger",
        "MODES",
        "Mfu",
        "Row",
        "RunSpec",
        "Step",
        "WalkState",
        "flop_report",
    ],
    tuneproof.attention: [
        "AttentionPath",
        "Context",
        "Explanation",
        "FlexSetup",
        "KernelChoice",
        "LayerExplanation",
        "PATHS",
        "RecompileGuard",
        "Rows",
        "causal_block_mask",
        "choose_for_head_dims",
        "choose_kernel_options",
        "document_block_mask",
        "enable_flex",
        "explain",
        "padding_block_mask",
        "parse_capability",
        "path",
        "run_with_smem_fallback",
        "sliding_block_mask",
    ],
    tuneproof.data: [
        "BucketBatchSampler",
        "PackedBatchSampler",
        "PackedCollator",
        "PadToLongest",
        "PlanStats",
        "RowsDataset",
        "best_fit_decreasing",
        "check_packed_batch",
        "hf_length_grouped_plan",
        "plan_stats",
        "random_plan",
        "read_lengths",
        "synthetic_lengths",
    ],
    tuneproof.ship: [
        "Adapter",
        "Checkpoint",
        "Engine",
        "Fingerprint",
        "Health",
        "MergeResult",
        "QuantRecipe",
        "audit_checkpoint",
        "audit_recipe",
        "characterise",
        "check_adapter",
        "diff_fingerprints",
        "engine",
        "fingerprint",
        "open_checkpoint",
        "read_adapter",
        "read_fingerprint",
        "read_header",
        "read_quant_recipe",
    ],
    tuneproof.measure: [
        "Agreement",
        "ConstantTerm",
        "CrossCheck",
        "Interleaved",
        "KernelTable",
        "ProbeResult",
        "ProbeSetup",
        "ScalingFit",
        "Timing",
        "cross_check",
        "fit_scaling",
        "judge_agreement",
        "judge_constant",
        "kernel_table",
        "load_trace",
        "read_points",
        "time_fn",
        "time_interleaved",
    ],
}


def test_front_doors_export_exactly_these_names() -> None:
    for area, names in FRONT_DOORS.items():
        assert sorted(area.__all__) == sorted(names), area.__name__
        for name in names:
            assert getattr(area, name) is not None, (area.__name__, name)


def test_import_tuneproof_is_light() -> None:
    heavy = "('torch', 'transformers', 'numpy', 'scipy', 'rich', 'click')"
    code = "import sys, tuneproof, tuneproof.arch, tuneproof.flops, tuneproof.attention, tuneproof.measure, "
    code += f"tuneproof.data, tuneproof.gate; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


def test_no_library_module_imports_the_cli() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if "cli" not in p.relative_to(SRC).parts
        and p.name != "__main__.py"  # `python -m tuneproof`: the command line's second entry point
        and any(m.startswith("tuneproof.cli") for m in _imports(p))
    ]
    assert offenders == []


def test_python_dash_m_tuneproof_is_the_command_line() -> None:
    """What torchrun and accelerate launch run: `-m tuneproof train R.toml`."""
    done = subprocess.run(
        [sys.executable, "-m", "tuneproof", "train", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "Usage: tuneproof train" in done.stdout


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            out.add(id(first.value))
    return out


def test_library_messages_never_name_a_cli_flag() -> None:
    """Library errors name fields ({seq_len}); only the CLI turns them into flags (--seq-len)."""
    flag = re.compile(r"(^|\s)--[a-z][a-z-]+")
    offenders = []
    for p in SRC.rglob("*.py"):
        if "cli" in p.relative_to(SRC).parts:
            continue
        tree = ast.parse(p.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            is_message = (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            )
            # another command named as advice ('tuneproof fingerprint BASE --out F') is no flag of this call
            text = re.sub(r"'tuneproof [^']*'", "", node.value) if is_message else ""
            if is_message and flag.search(text):
                offenders.append(f"{p.relative_to(SRC)}:{node.lineno}: {node.value[:60]}")
    assert offenders == []
