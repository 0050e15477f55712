"""The public surface is pinned: changing it is a deliberate act."""

from __future__ import annotations

import subprocess
import sys

import tuneproof
import tuneproof.arch
import tuneproof.flops


def test_front_door_names() -> None:
    assert sorted(tuneproof.__all__) == sorted(
        ["RunSpec", "TuneproofError", "__version__", "flop_report", "from_config", "lookup_gpu"]
    )
    for name in tuneproof.__all__:
        assert getattr(tuneproof, name) is not None


def test_area_exports() -> None:
    assert sorted(tuneproof.flops.__all__) == sorted(
        [
            "ATTN_PATHS",
            "MODES",
            "Excess",
            "FlopReport",
            "Ledger",
            "Mfu",
            "Row",
            "RunSpec",
            "flex_block_pairs",
            "flop_report",
            "intended_pairs",
            "performed_pairs",
        ]
    )
    assert "from_config" in tuneproof.arch.__all__ and "ModelShape" in tuneproof.arch.__all__


def test_other_areas_front_doors() -> None:
    import tuneproof.attention
    import tuneproof.data
    import tuneproof.measure

    assert sorted(tuneproof.attention.__all__) == sorted(
        [
            "Adjudication",
            "Context",
            "Diff",
            "Explanation",
            "FlexSetup",
            "KernelChoice",
            "LayerExplanation",
            "RecompileGuard",
            "adjudicate",
            "causal_block_mask",
            "choose_for_head_dims",
            "choose_kernel_options",
            "document_block_mask",
            "enable_flex",
            "explain",
            "padding_block_mask",
            "parse_capability",
            "run_with_smem_fallback",
            "sliding_block_mask",
        ]
    )
    assert sorted(tuneproof.data.__all__) == sorted(
        [
            "BucketBatchSampler",
            "PackedBatchSampler",
            "PackedCollator",
            "PadToLongest",
            "PlanStats",
            "best_fit_decreasing",
            "check_packed_batch",
            "hf_length_grouped_plan",
            "plan_stats",
            "random_plan",
            "read_lengths",
            "synthetic_lengths",
        ]
    )
    assert sorted(tuneproof.measure.__all__) == sorted(
        [
            "ConstantTerm",
            "KernelTable",
            "ProbeResult",
            "ProbeSpec",
            "ScalingFit",
            "Timing",
            "fit_scaling",
            "kernel_table",
            "load_trace",
            "read_points",
            "run_probe",
            "time_fn",
        ]
    )
    for area in (tuneproof.attention, tuneproof.data, tuneproof.measure):
        for name in area.__all__:
            assert getattr(area, name) is not None


def test_import_tuneproof_is_light() -> None:
    heavy = "('torch', 'transformers', 'numpy', 'rich', 'click')"
    code = f"import sys, tuneproof; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
