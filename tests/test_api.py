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


def test_import_tuneproof_is_light() -> None:
    heavy = "('torch', 'transformers', 'numpy', 'rich', 'click')"
    code = f"import sys, tuneproof; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
