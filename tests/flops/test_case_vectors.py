"""docs/reference-run.md section 1 as test vectors, on the Gemma-4-26B-A4B-like config in examples/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuneproof.arch import from_config
from tuneproof.attention.pairs import intended_pairs
from tuneproof.flops import Step, flop_report
from tuneproof.flops.report import Mfu
from tuneproof.hardware.gpus import Peak

CASE_CONFIG = Path(__file__).parent.parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json"
T, B, W, HEADS = 16384, 2, 1024, 16


def case_run(**overrides: object) -> Step:
    """The CASE step: LoRA on the attention projections, activation checkpointing, SDPA, 2 x 16,384."""
    fields: dict = dict(
        seq_len=T,
        batch=B,
        attn="sdpa",
        mode="lora",
        grad_ckpt=True,
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
    )
    return Step(**{**fields, **overrides})


@pytest.fixture(scope="module")
def shape():
    return from_config(CASE_CONFIG)


def test_case_shape(shape) -> None:
    groups = shape.attention_groups
    assert groups.keys() == {"sliding w=1024 h=16 d=256", "full h=16 d=512"}
    assert len(groups["sliding w=1024 h=16 d=256"]) == 25 and len(groups["full h=16 d=512"]) == 5
    assert shape.parameter_count(active=True) == pytest.approx(3.8e9, rel=0.05)  # "A4B"
    assert shape.parameter_count() == pytest.approx(25.2e9, rel=0.05)  # "26B" with embeddings


def test_billed_flops_and_logged_mfu() -> None:
    # 27.1 TFLOP/s x 34.85 s = 9.4e14 FLOP billed; 8.6 % MFU means a ~315 TFLOP/s peak.
    billed = 27.1e12 * 34.85
    assert billed == pytest.approx(9.4e14, rel=0.01)
    m = Mfu.compute(billed, 2 * billed, 34.85, Peak(tflops=315.0, source="trainer's peak", dtype="bf16"))
    assert m.intended == pytest.approx(0.086, abs=0.001)
    assert m.performed == pytest.approx(0.172, abs=0.001)


def test_dense_sliding_excess_is_8_2e14(shape) -> None:
    report = flop_report(shape, case_run())
    sliding = [e for e in report.excess if e.name.startswith("sliding attention")]
    assert len(sliding) == 1
    # CASE: 4 * heads * head_dim * (T^2 - T*w) per layer, sequence and pass; 25 layers x 2 seqs x 4 passes
    case = 4 * HEADS * 256 * (T * T - T * W) * 25 * B * 4
    assert case == pytest.approx(8.2e14, rel=0.01)
    # ours counts the window exactly (T*W - W(W-1)/2 pairs), CASE approximates it as T*W
    exact = 4 * HEADS * 256 * (T * T - intended_pairs(T, W)) * 25 * B * 4
    assert sliding[0].flops == pytest.approx(exact, rel=1e-12)
    assert sliding[0].flops == pytest.approx(case, rel=0.005)
    assert "kv_length 16384 >= window 1024" in sliding[0].why
    # no padding: the global layers keep is_causal, so they add no attention excess
    assert not [e for e in report.excess if e.name.startswith("full attention")]
    assert report.performed.total - report.intended.total == pytest.approx(
        sum(e.flops for e in report.excess)
    )


def test_padded_global_layer_gap_is_exact(shape) -> None:
    lengths = (T, 11000)
    report = flop_report(shape, case_run(lengths=lengths))
    glob = [e for e in report.excess if e.name.startswith("full attention")]
    assert len(glob) == 1 and "padding" in glob[0].why
    per_pair_pass = 4 * HEADS * 512  # QK^T + AV, head_dim 512
    lost = B * T * T - sum(intended_pairs(n, None) for n in lengths)
    assert glob[0].flops == pytest.approx(lost * per_pair_pass * 4 * 5, rel=1e-12)  # 4 passes, 5 layers


def test_flex_removes_the_dense_sliding_excess(shape) -> None:
    sdpa = flop_report(shape, Step(seq_len=T, batch=B, attn="sdpa", mode="lora", grad_ckpt=True))
    flex = flop_report(shape, Step(seq_len=T, batch=B, attn="flex_attention", mode="lora", grad_ckpt=True))
    sliding = [e for e in flex.excess if e.name.startswith("sliding attention")]
    assert (
        sliding
        and sliding[0].flops < 0.1 * next(e for e in sdpa.excess if e.name.startswith("sliding")).flops
    )
    assert flex.intended.total == sdpa.intended.total


def test_ledger_views_add_up(shape) -> None:
    report = flop_report(
        shape, Step(seq_len=4096, batch=2, attn="sdpa", padding_fraction=0.2, mode="lora", grad_ckpt=True)
    )
    for ledger in (report.intended, report.performed):
        per_layer = sum(sum(c.values()) for c in ledger.by_layer().values())
        assert per_layer == pytest.approx(ledger.total)
        assert sum(ledger.by("pass_").values()) == pytest.approx(ledger.total)
        assert len(ledger.by_layer()) == 31  # 30 layers + the model-level LM head
