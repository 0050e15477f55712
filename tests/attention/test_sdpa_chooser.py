"""PyTorch's SDPA backend choice, held two ways.

1. On CUDA, against an oracle transcribed a second time, straight from `cuda/sdp_utils.cpp` and
   `sdp_utils_cpp.h` (torch 2.13), in the C++'s own shape: `can_use_*_attention` as gate lists,
   `minimum_gemm_alignment` with its `use_tensor_cores`, `check_prefer_cudnn_attention`, then
   `select_sdp_backend`'s loop. The grid crosses dtype, head_dim (non-multiples of 8 and MLA's 192/128
   included), mask, dropout (0, 0.1, 0.125), GQA, training, capabilities 7.5-12.0, cuDNN 9.10-9.23 and
   the CUDA build: the chosen backend and the backends refused on the way must agree in every case.
2. On this CPU, the predicted choice against `torch._fused_sdp_choice` itself, over dtype, head_dim,
   mask, dropout, training and GQA, with the K/V heads transformers really passes."""

from __future__ import annotations

import itertools

import pytest

from contexts import context
from tuneproof.arch.shape import AttentionSpec
from tuneproof.attention.dispatch import predict
from tuneproof.attention.sdpa_cuda import choose, sdpa_call
from tuneproof.attention.stack import Stack


def oracle(cap, dtype, d_qk, d_v, mask, dropout, grad, hq, hkv, gqa, cudnn, cuda, d256, torch_v):  # type: ignore[no-untyped-def]
    """select_sdp_backend for one dense call (torch 2.13), written from the C++ again."""
    major, minor = cap
    half = dtype in ("bf16", "fp16")

    def sm(lo, hi):  # type: ignore[no-untyped-def]
        return lo <= cap <= hi

    def heads_ok(supports_gqa):  # type: ignore[no-untyped-def]
        # check_batch_size_and_num_heads_dense: gqa only where supported, else equal heads
        if gqa and supports_gqa:
            return hq % hkv == 0
        return hq == hkv

    def can_flash():  # type: ignore[no-untyped-def]
        if mask:  # check_for_attn_mask
            return False
        if not (d_qk == d_v and d_qk <= 256):  # check_head_dim_size_flash
            return False
        if not sm((8, 0), (12, 1)):  # check_flash_attention_hardware_support
            return False
        # ..._gt192_constraints_on_sm86_89_or_120 (written as the C++ nests it)
        if grad and (sm((8, 6), (8, 9)) or sm((12, 0), (12, 1))):  # noqa: SIM102
            if not (d_qk <= 192 or (not dropout > 0.0 and d_qk > 224)):
                return False
        if not half:  # check_dtypes_flash_attention
            return False
        return heads_ok(True)

    def gemm_alignment():  # type: ignore[no-untyped-def]
        use_tc = major >= 8 or (major >= 7 and half)
        align = 4 if major >= 8 else 1
        if use_tc:
            align = max(align, 128 // (16 if half else 32))
        return align

    def can_efficient():  # type: ignore[no-untyped-def]
        if not sm((5, 0), (12, 1)):
            return False
        a = gemm_alignment()
        if not (d_qk % a == 0 and d_v % a == 0):
            return False
        if not heads_ok(torch_v >= (2, 14)):
            return False
        return dtype in (("fp16", "fp32", "bf16") if major >= 8 else ("fp16", "fp32"))

    def can_cudnn():  # type: ignore[no-untyped-def]
        if cudnn < 90000:
            return False
        if dropout > 0.0 and 91100 < cudnn < 91400:
            return False
        if not (half if major >= 8 else dtype == "fp16"):  # check_dtypes_low_precision
            return False
        if not sm((8, 0), (12, 1)):
            return False
        if dropout * 16.0 != int(dropout * 16.0):  # check_cudnn_dropout
            return False
        if not heads_ok(True):
            return False
        is_90_10x = (major == 9 and not minor) or major == 10
        bad_107 = major == 10 and minor == 7 and cudnn <= 92500
        limit = 128
        if is_90_10x and not bad_107 and cudnn > 92200 and d256:
            limit = 256
        elif is_90_10x and cudnn >= 91100 and d_qk == 192 and d_v == 128:
            limit = 192
        if not (d_qk <= limit and d_v <= limit) or d_qk % 8 or d_v % 8:
            return False
        if grad and cudnn > 92200 and d256 and is_90_10x and not bad_107:  # noqa: SIM102
            if not ((d_qk <= 128 and d_v <= 128) or (d_qk, d_v) in ((192, 128), (256, 256))):
                return False
        return True

    prefer = cudnn > 91500 and major in (9, 10) and (cuda >= (13, 0) or not minor or minor == 3)
    order = ["cudnn", "flash", "efficient", "math"] if prefer else ["flash", "efficient", "math", "cudnn"]
    tried = []
    for backend in order:
        if (
            backend == "math"
            or {"flash": can_flash, "efficient": can_efficient, "cudnn": can_cudnn}[backend]()
        ):
            return backend, tried
        tried.append(backend)
    raise AssertionError("math always passes")


CAPS = ((7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0))
HEAD_DIMS = ((64, 64), (100, 100), (128, 128), (160, 160), (192, 128), (192, 192), (200, 200), (232, 232),
             (256, 256), (512, 512))  # fmt: skip
STACKS = ((91002, (12, 8)), (91200, (13, 0)), (92301, (12, 8)), (92301, (13, 0)))


def grid():  # type: ignore[no-untyped-def]
    for cap, (d_qk, d_v), dtype, mask, dropout, grad, heads, (cudnn, cuda) in itertools.product(
        CAPS, HEAD_DIMS, ("bf16", "fp16", "fp32"), (False, True), (0.0, 0.1, 0.125), (False, True),
        ((8, 8), (8, 2)), STACKS,
    ):  # fmt: skip
        yield cap, d_qk, d_v, dtype, mask, dropout, grad, heads, cudnn, cuda


def test_the_chooser_agrees_with_the_sources_on_every_case_of_the_grid() -> None:
    cases = mismatches = 0
    first = None
    for cap, d_qk, d_v, dtype, mask, dropout, grad, (hq, hkv), cudnn, cuda in grid():
        stack = Stack(torch=(2, 13), cuda=cuda, cudnn=cudnn, frontend_d256=True)
        call = sdpa_call(cap, dtype, d_qk, d_v, mask, dropout, grad, hq, hkv, stack)
        got, refused = choose(call)
        heads = (call.heads, call.kv_heads, call.enable_gqa)
        want, tried = oracle(
            cap, dtype, d_qk, d_v, mask, call.dropout, grad, *heads, cudnn, cuda, True, (2, 13)
        )
        tried_got = [b for b in refused if not refused[b].startswith("not preferred")]
        cases += 1
        if got != want or tried_got != tried:
            mismatches += 1
            first = first or (cap, d_qk, d_v, dtype, mask, dropout, grad, hq, hkv, cudnn, cuda, got, want)
    assert cases >= 500 and mismatches == 0, (cases, mismatches, first)


def test_the_grid_reaches_every_backend_and_every_gate() -> None:
    """The grid is not a grid of one answer: each backend is chosen, and each version rule decides
    some case (dropout on cuDNN 9.12, D256 and its backward, GQA on the memory-efficient kernel)."""
    seen: set[str] = set()
    reasons = ""
    for cap, d_qk, d_v, dtype, mask, dropout, grad, (hq, hkv), cudnn, cuda in grid():
        call = sdpa_call(
            cap,
            dtype,
            d_qk,
            d_v,
            mask,
            dropout,
            grad,
            hq,
            hkv,
            Stack(torch=(2, 13), cuda=cuda, cudnn=cudnn, frontend_d256=True),
        )
        got, refused = choose(call)
        seen.add(got)
        reasons += " ".join(refused.values())
    assert seen == {"flash", "efficient", "cudnn", "math"}
    fragments = (
        "no dropout in SDPA above 9.11.0 and below 9.14", "not a multiple of 1/16", "backward with head_dims",
        "kernel takes only equal head counts", "with dropout 0.1 on", "not a multiple of 8",
    )  # fmt: skip
    for fragment in fragments:
        assert fragment in reasons, fragment


@pytest.mark.parametrize(
    ("cap", "head_dim", "training", "dropout", "want"),
    [
        ((9, 0), 256, True, 0.0, "cudnn"),  # D256 forward and backward at 256/256 (cuDNN 9.23, frontend 1.24)
        ((9, 0), 192, True, 0.0, "flash"),  # cuDNN's backward refuses 192/192 on sm90: flash takes it
        ((9, 0), 128, True, 0.1, "flash"),  # dropout 0.1 is not a multiple of 1/16: cuDNN refuses
        ((9, 0), 128, True, 0.125, "cudnn"),
        ((8, 6), 256, True, 0.1, "efficient"),  # flash on sm86 refuses (224, 256] with dropout in training
        ((8, 6), 256, True, 0.0, "flash"),
        ((12, 0), 160, True, 0.0, "flash"),
    ],
)
def test_context_to_call_reads_dropout_and_training(cap, head_dim, training, dropout, want) -> None:  # type: ignore[no-untyped-def]
    spec = AttentionSpec(
        kind="full", window=None, num_heads=8, num_kv_heads=8, head_dim=head_dim, v_head_dim=head_dim
    )
    ctx = context(
        seq_len=2048, batch=1, capability=cap, training=training, dropout=dropout, cudnn="9.23.1", cuda="13.0"
    )
    assert predict(ctx, spec).backend == want


def test_gqa_without_a_mask_falls_to_math_where_flash_cannot_run_before_torch_2_14() -> None:
    """transformers passes enable_gqa with no mask (use_gqa_in_sdpa); on a T4 (fp16, no flash) torch
    2.13's memory-efficient kernel refuses unequal heads, so SDPA runs math; with a mask K/V are copied
    to the query heads and the memory-efficient kernel takes it."""
    spec = AttentionSpec(kind="full", window=None, num_heads=32, num_kv_heads=8, head_dim=128, v_head_dim=128)
    plain = predict(context(seq_len=2048, batch=1, capability=(7, 5), dtype="fp16"), spec)
    assert plain.backend == "math" and "kernel takes only equal head counts" in plain.refused["efficient"]
    padded = predict(context(seq_len=2048, batch=2, padded=True, capability=(7, 5), dtype="fp16"), spec)
    assert padded.backend == "efficient"


def test_the_cudnn_preference_reads_the_version_and_the_cuda_build() -> None:
    spec = AttentionSpec(kind="full", window=None, num_heads=8, num_kv_heads=8, head_dim=128, v_head_dim=128)
    cases = (
        ("9.10.2", "12.8", (9, 0), "efficient"), ("9.23.1", "12.8", (9, 0), "cudnn"),
        ("9.23.1", "12.8", (10, 3), "cudnn"), ("9.23.1", "13.0", (12, 0), "efficient"),
    )  # fmt: skip
    for cudnn, cuda, cap, want in cases:
        ctx = context(seq_len=1024, batch=1, padded=True, capability=cap, cudnn=cudnn, cuda=cuda)
        got = predict(ctx, spec)
        assert got.backend == want, (cudnn, cuda, cap, got.refused)
    # CUDA 12.x builds prefer cuDNN only on minor 0 or 3 of majors 9 and 10 (a 10.1 part, say)
    for cuda, want in (((12, 8), "efficient"), ((13, 0), "cudnn")):
        call = sdpa_call(
            (10, 1),
            "bf16",
            128,
            128,
            True,
            0.0,
            False,
            8,
            8,
            Stack(torch=(2, 13), cuda=cuda, cudnn=92301, frontend_d256=True),
        )
        got, refused = choose(call)
        assert got == want, refused
        assert want == "cudnn" or "on CUDA 12.8 builds only on minor 0 or 3" in refused["cudnn"]


CPU_HEAD_DIMS = ((64, 64), (60, 60), (192, 128), (256, 256), (512, 512))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_cpu_prediction_agrees_with_torch_fused_sdp_choice(dtype: str) -> None:
    """Every case asked of torch itself, with the tensors transformers would pass: 0 mismatches."""
    from tuneproof.attention import dispatch

    cases = 0
    for (d_qk, d_v), mask, dropout, training, kv in itertools.product(
        CPU_HEAD_DIMS, (False, True), (0.0, 0.1), (False, True), (4, 1)
    ):
        spec = AttentionSpec(
            kind="full", window=None, num_heads=4, num_kv_heads=kv, head_dim=d_qk, v_head_dim=d_v
        )
        ctx = context(seq_len=64, batch=1, dtype=dtype, training=training, dropout=dropout, padded=mask)
        predicted = dispatch.predict_sdpa_cpu(ctx, spec)[0]
        live = dispatch._live_sdpa(ctx, spec, mask)[0]
        assert predicted == live, (d_qk, d_v, mask, dropout, training, kv)
        cases += 1
    assert cases == 80
