"""The predicted SDPA dispatch over a grid of cards, head_dims, masks, dtypes and training, pinned as a
golden table (reasons included), and the live path's questions to PyTorch and transformers pinned
by what it asks them."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from contexts import context
from tuneproof.arch.shape import AttentionSpec
from tuneproof.attention import dispatch
from tuneproof.attention.dispatch import predict
from tuneproof.hardware.capability import KNOWN_CAPABILITIES

GRID = Path(__file__).parent.parent / "data" / "golden" / "dispatch_grid.json.gz"
HEAD_DIMS = (60, 64, 96, 128, 192, 200, 224, 256, 512)


def grid() -> dict[str, object]:
    out: dict[str, object] = {}
    for cap in KNOWN_CAPABILITIES:
        for head_dim in HEAD_DIMS:
            spec = AttentionSpec(
                kind="full", window=None, num_heads=8, num_kv_heads=8, head_dim=head_dim, v_head_dim=head_dim
            )
            for padded in (False, True):
                for dtype in ("bf16", "fp32"):
                    for training in (False, True):
                        ctx = context(
                            seq_len=512,
                            batch=2,
                            padded=padded,
                            dtype=dtype,
                            training=training,
                            capability=cap,
                        )
                        mask, why, backend, refused, kernel = predict(ctx, spec)
                        kind = f"{'padded' if padded else 'plain'} {dtype} {'train' if training else 'infer'}"
                        key = f"{cap[0]}.{cap[1]} d={head_dim} {kind}"
                        out[key] = {
                            "mask": mask,
                            "backend": backend,
                            "refused": refused,
                            "kernel": kernel,
                            "why": why,
                        }
    return out


def test_predicted_dispatch_grid_is_pinned() -> None:
    got = grid()
    if os.environ.get("TUNEPROOF_UPDATE_GOLDEN") == "1":
        GRID.write_bytes(gzip.compress((json.dumps(got, indent=1, sort_keys=True) + "\n").encode(), mtime=0))
    want = json.loads(gzip.decompress(GRID.read_bytes()))
    changed = [k for k in want if want[k] != got.get(k)]
    assert not changed and set(got) == set(want), f"{len(changed)} grid points changed, e.g. {changed[:3]}"


def test_grid_spot_checks_against_the_rules_in_words() -> None:
    g = grid()
    # Blackwell workstation (12.0), the CASE: cuDNN never preferred, flash refuses masks and d > 256
    assert g["12.0 d=256 padded bf16 train"]["backend"] == "efficient"
    assert g["12.0 d=512 plain bf16 train"]["backend"] == "efficient"
    assert g["12.0 d=128 plain bf16 train"]["backend"] == "flash"
    # Hopper prefers cuDNN when the head_dim allows
    assert g["9.0 d=128 padded bf16 infer"]["backend"] == "cudnn"
    assert g["9.0 d=512 padded bf16 infer"]["backend"] == "efficient"
    # flash refuses fp32, and training with head_dim in (192, 224] on sm86/89/120
    assert g["8.0 d=128 plain fp32 infer"]["backend"] == "efficient"
    assert g["8.9 d=224 plain bf16 train"]["backend"] == "efficient"
    assert g["8.9 d=224 plain bf16 infer"]["backend"] == "flash"
    assert g["8.0 d=224 plain bf16 train"]["backend"] == "flash"
    # memory-efficient needs head_dim a multiple of 8 in bf16: 60 falls to math on pre-flash cards
    assert g["7.5 d=60 padded bf16 infer"]["backend"] == "math"


def test_live_sdpa_asks_pytorch_with_the_layers_shapes(monkeypatch) -> None:
    import torch

    seen = {}

    def fake_choice(q, k, v, mask, dropout, is_causal, enable_gqa=False):  # type: ignore[no-untyped-def]
        seen.update(q=q, k=k, v=v, mask=mask, dropout=dropout, is_causal=is_causal, gqa=enable_gqa)
        return int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)

    monkeypatch.setattr(torch, "_fused_sdp_choice", fake_choice)
    spec = AttentionSpec(kind="sliding", window=64, num_heads=6, num_kv_heads=2, head_dim=32, v_head_dim=48)
    ctx = context(seq_len=4096, batch=7, dtype="bf16", training=True)
    backend, refused, kernel = dispatch._live_sdpa(ctx, spec, mask=True)
    assert (backend, refused) == ("cpu_flash", {}) and "for CPU" in kernel
    # K/V expanded to the query heads; at most LIVE_LEN tokens and 2 rows: the rules depend on neither
    assert tuple(seen["q"].shape) == (2, 6, dispatch.LIVE_LEN, 32) and seen["q"].dtype == torch.bfloat16
    assert tuple(seen["k"].shape) == (2, 6, dispatch.LIVE_LEN, 32)
    assert tuple(seen["v"].shape) == (2, 6, dispatch.LIVE_LEN, 48)
    assert seen["q"].requires_grad and seen["v"].requires_grad
    assert tuple(seen["mask"].shape) == (2, 1, dispatch.LIVE_LEN, dispatch.LIVE_LEN)
    assert seen["dropout"] == 0.0 and seen["is_causal"] is False and seen["gqa"] is False
    dispatch._live_sdpa(context(seq_len=100, batch=1, dtype="fp32"), spec, mask=False)
    assert seen["mask"] is None and seen["is_causal"] is True and seen["q"].shape[2] == 100
    assert seen["q"].dtype == torch.float32 and not seen["q"].requires_grad
    # no mask and equal head_dims: transformers keeps the kv heads and passes enable_gqa; the
    # config's attention dropout reaches SDPA in training only
    same = AttentionSpec(kind="full", window=None, num_heads=6, num_kv_heads=2, head_dim=32, v_head_dim=32)
    dispatch._live_sdpa(context(seq_len=100, batch=1, dropout=0.1, training=True), same, mask=False)
    assert seen["gqa"] is True and tuple(seen["k"].shape)[1] == 2 and seen["dropout"] == 0.1
    dispatch._live_sdpa(context(seq_len=100, batch=1, dropout=0.1), same, mask=False)
    assert seen["dropout"] == 0.0


def test_live_sdpa_reports_math_when_pytorch_refuses_flash(monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch, "_fused_sdp_choice", lambda *a, **k: int(torch.nn.attention.SDPBackend.MATH))
    backend, refused, kernel = dispatch._live_sdpa(
        context(seq_len=64, batch=1),
        AttentionSpec(kind="full", window=None, num_heads=2, num_kv_heads=2, head_dim=16, v_head_dim=16),
        False,
    )
    why = "torch._fused_sdp_choice did not pick flash (the rule table expected it: torch differs here)"
    assert backend == "math" and refused == {"cpu_flash": why}
    assert "full score matrix" in kernel


def test_live_mask_asks_transformers_with_the_real_kv_length_and_window(monkeypatch) -> None:
    import transformers.masking_utils as mu

    calls = []

    def fake(padding, q_len, kv_len, q_off, kv_off, window):  # type: ignore[no-untyped-def]
        calls.append((padding.tolist(), q_len, kv_len, q_off, kv_off, window))
        return True

    monkeypatch.setattr(mu, "_ignore_causal_mask_sdpa", fake)
    spec = AttentionSpec(kind="sliding", window=1024, num_heads=4, num_kv_heads=4, head_dim=64, v_head_dim=64)
    got = dispatch._live_mask(context(seq_len=16384, batch=2, padded=True), spec)
    assert calls == [([[True, False]], 16384, 16384, 0, 0, 1024)]
    # transformers says "skip the mask" while the rules say "materialise": the disagreement is reported
    assert got is not None and got[0] is False and "differs from the verified one" in got[1]
    assert dispatch._live_mask(context(seq_len=64, batch=1, packed=True), spec) is None
    assert dispatch._live_mask(context(seq_len=64, batch=1, attn="eager"), spec) is None


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"seq_len": 0}, "seq_len must be >= 1"),
        ({"batch": -1}, "batch must be >= 1"),
        ({"attn": "x"}, "attn 'x' is not a known attention path"),
        ({"dtype": "fp8"}, "dtype 'fp8' is not known"),
        ({"padded": True, "packed": True}, "padded and packed together"),
        ({"packed": True, "seq_len": 1}, "a packed row of width 1 holds one document"),
        ({"capability": (13, 0)}, "unknown capability (13, 0)"),
    ],
)
def test_context_refusals(kw: dict, fragment: str) -> None:
    from tuneproof.core.errors import TuneproofError

    with pytest.raises(TuneproofError) as e:
        context(**{"seq_len": 64, "batch": 1, **kw})
    assert fragment in e.value.message


def test_context_rows_and_device() -> None:
    assert context(seq_len=10, batch=3, padded=True).rows.docs == ((10,), (10,), (9,))
    assert context(seq_len=11, batch=2, packed=True).rows.docs == ((5, 6), (5, 6))
    assert context(seq_len=10, batch=2).rows.docs == ((10,), (10,))
    assert context(seq_len=8, batch=1).device == "cpu"
    assert context(seq_len=8, batch=1, capability=(12, 0)).device == "cuda sm_120"
