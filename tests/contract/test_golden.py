"""Golden outputs: what the commands print for the CASE and for recorded inputs, pinned in full.

The printed explanation is the product: a changed reason, a swapped label or a reformatted number is
a change a reviewer must see. Regenerate after a deliberate change with
`TUNEPROOF_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/contract/test_golden.py` and read the diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tuneproof.cli.app import main

ROOT = Path(__file__).parent.parent.parent
GOLDEN = Path(__file__).parent.parent / "data" / "golden"
CASE = str(ROOT / "examples" / "gemma4-26b-a4b-like" / "config.json")
DATA = Path(__file__).parent.parent / "data"

CASES = {
    "flops_case_sdpa": [
        "flops",
        "--config",
        CASE,
        "--seq-len",
        "16384",
        "--batch",
        "2",
        "--mode",
        "lora",
        "--grad-ckpt",
        "--step-time",
        "34.85",
        "--peak-tflops",
        "315",
    ],
    "flops_case_padded_flex": [
        "flops",
        "--config",
        CASE,
        "--seq-len",
        "16384",
        "--batch",
        "2",
        "--attn",
        "flex_attention",
        "--padding-fraction",
        "0.3",
        "--mode",
        "lora",
        "--lora-rank",
        "8",
        "--lora-targets",
        "q_proj,v_proj",
        "--grad-ckpt",
        "--step-time",
        "20",
        "--gpu",
        "RTX PRO 6000 Blackwell",
    ],
    "flops_tiny_eager_full": [
        "flops",
        "--seq-len",
        "300",
        "--batch",
        "3",
        "--attn",
        "eager",
        "--padding-fraction",
        "0.25",
        "--mode",
        "full",
        "--step-time",
        "0.5",
        "--gpu",
        "H100",
    ],
    "flops_tiny_forward_flash": [
        "flops",
        "--seq-len",
        "700",
        "--attn",
        "flash_attention_2",
        "--mode",
        "forward",
    ],
    "explain_case_sm120": [
        "explain",
        "--config",
        CASE,
        "--seq-len",
        "16384",
        "--batch",
        "2",
        "--padded",
        "--capability",
        "12.0",
        "--training",
    ],
    "explain_case_sm90_unpadded": [
        "explain",
        "--config",
        CASE,
        "--seq-len",
        "8192",
        "--batch",
        "2",
        "--gpu",
        "H100",
        "--dtype",
        "fp16",
    ],
    "explain_case_sm80_fp32": [
        "explain",
        "--config",
        CASE,
        "--seq-len",
        "512",
        "--batch",
        "1",
        "--capability",
        "8.0",
        "--dtype",
        "fp32",
        "--training",
    ],
    "explain_case_sm86_packed_flex": [
        "explain",
        "--config",
        CASE,
        "--seq-len",
        "4096",
        "--batch",
        "1",
        "--packed",
        "--capability",
        "8.6",
        "--attn",
        "flex_attention",
        "--training",
    ],
    "explain_case_sm89_head224": [
        "explain",
        "--config",
        str(DATA / "head224.json"),
        "--seq-len",
        "2048",
        "--batch",
        "1",
        "--capability",
        "8.9",
        "--training",
    ],
    "kernels_case": ["kernels", "--trace", str(DATA / "case_sm120.json.gz")],
    # the fit on recorded points (tests/data/points_*.csv): absent, present with an outlier set aside,
    # undetermined with the repeats that would decide it, and too few repeats for an interval
    "fit_case": ["fit", "--points", str(DATA / "points_case.csv"), "--at", "65536"],
    "fit_constant_outlier": ["fit", "--points", str(DATA / "points_constant_outlier.csv")],
    "fit_undetermined": ["fit", "--points", str(DATA / "points_undetermined.csv"), "--at", "32768"],
    "fit_three_repeats": ["fit", "--points", str(DATA / "points_three_repeats.csv")],
    # fewer than 6 repeats decided from the pooled residuals: a constant present from 3 repeats, and the
    # reference run's three points (one step per width) with the constant absent
    "fit_constant_three": ["fit", "--points", str(DATA / "points_constant_three.csv")],
    "fit_reference_three": ["fit", "--points", str(DATA / "points_reference_three.csv")],
    "kernels_zoo": ["kernels", "--trace", str(DATA / "zoo_sm90.json.gz"), "--top", "2"],
}


def _normalise(text: str) -> str:
    return text.replace(str(ROOT), "<repo>")


def _rounded(data: object) -> object:
    """JSON numbers to 10 significant digits: a fit's least-squares digits past that follow the BLAS
    build numpy and scipy were installed with (a new numpy moved the 14th digit), not this code; below
    1e-12 in size, 0 (an exact fit's residual is 0 or 3.6e-15 by the same build)."""
    if isinstance(data, float):
        return 0.0 if abs(data) < 1e-12 else float(f"{data:.10g}")
    if isinstance(data, dict):
        return {k: _rounded(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_rounded(v) for v in data]
    return data


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_golden(capsys, monkeypatch, name: str, fmt: str) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    args = CASES[name] + (["--json"] if fmt == "json" else [])
    assert main(args) == 0
    got = _normalise(capsys.readouterr().out)
    if fmt == "json":
        got = json.dumps(_rounded(json.loads(got)), indent=1, sort_keys=True) + "\n"
    path = GOLDEN / f"{name}.{'json' if fmt == 'json' else 'txt'}"
    if os.environ.get("TUNEPROOF_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert got == path.read_text(), f"{path.name} changed: regenerate it if the change is deliberate"
