"""flex_attention safety: kernel options, out-of-resource fallback, the recompile guard, block masks."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

from tuneproof.arch import resolve
from tuneproof.attention.flex import (
    EAGER_FLEX_WARNING,
    RecompileGuard,
    document_block_mask,
    loud_recompile_errors,
    padding_block_mask,
    sliding_block_mask,
)
from tuneproof.attention.kernel_options import (
    choose_for_head_dims,
    choose_kernel_options,
    default_fwd,
    parse_out_of_resource,
    run_with_smem_fallback,
    smem_bwd,
    smem_fwd,
)
from tuneproof.core.errors import TuneproofError


def test_estimate_reproduces_the_published_data_points() -> None:
    assert smem_fwd(64, 32, 512, "bf16", 1) == 102_400  # the reference run: 64x32 at head_dim 512, sm_120
    assert smem_fwd(64, 32, 256, "fp32", 1) == 106_496  # pytorch#143832 (inductor's 1-stage retry)
    assert smem_bwd(64, 64, 256, "bf16", 1) == 114_688  # pytorch#198224, sm_12x backward default (1 stage)
    # the H200 device check: torch's default fwd at head_dim 512 is 64x32 x 3 stages, "Required: 26x,xxx"
    assert default_fwd(512, "bf16", (9, 0)) == (64, 32, 3, 4)
    h200 = smem_fwd(64, 32, 512, "bf16", 3)
    assert h200 == 262_144 and 260_000 <= h200 < 270_000 and h200 > 232_448
    assert (
        smem_fwd(64, 32, 512, "bf16", 3) > smem_fwd(64, 32, 512, "bf16", 2) > smem_fwd(64, 32, 512, "bf16", 1)
    )
    assert smem_bwd(64, 64, 256, "bf16", 2) > smem_bwd(64, 64, 256, "bf16", 1)
    assert smem_fwd(32, 32, 384, "bf16") == smem_fwd(
        32, 32, 512, "bf16"
    )  # head_dim rounds up to a power of 2


def test_sm120_head_dim_512_forward_gets_32x32_with_the_bytes() -> None:
    c = choose_kernel_options(512, "bf16", capability=(12, 0), pass_="fwd")
    assert c.options["fwd_BLOCK_M"] == 32 and c.options["fwd_BLOCK_N"] == 32
    assert c.options["fwd_num_stages"] == 1  # 64x32 at 1 stage (102,400 B) is still past 101,376 B
    assert "262,144 B > 101,376 B" in c.reason and "32x32 x 1 stage needs 67,584 B" in c.reason


def test_sm90_head_dim_512_refuses_the_default_and_keeps_two_stages() -> None:
    c = choose_kernel_options(512, "bf16", capability=(9, 0), pass_="fwd")
    assert "default 64x32 x 3 stages" in c.reason and "262,144 B > 232,448 B" in c.reason
    assert c.options == {"fwd_BLOCK_M": 64, "fwd_BLOCK_N": 32, "fwd_num_stages": 2, "fwd_num_warps": 4}
    assert c.smem_bytes == 196_608 and c.source == "estimated"


@pytest.mark.parametrize("cap", [(9, 0), (12, 0)])
def test_the_chooser_never_keeps_a_default_past_the_limit(cap: tuple[int, int]) -> None:
    for pass_ in ("fwd", "bwd"):
        for head_dim in (64, 128, 256, 512):
            c = choose_kernel_options(head_dim, "bf16", capability=cap, pass_=pass_)
            assert c.smem_bytes <= c.smem_limit
    c = choose_kernel_options(512, "bf16", capability=cap, pass_="fwd")
    assert c.options  # head_dim 512: the defaults are refused on both


def test_sm120_backward_head_dim_256_needs_smaller_blocks() -> None:
    c = choose_kernel_options(256, "bf16", capability=(12, 0), pass_="bwd")
    assert "114,688 B > 101,376 B" in c.reason and c.smem_bytes <= 101_376
    assert c.options["bwd_BLOCK_M1"] % 16 == 0 and 128 % c.options["bwd_BLOCK_N1"] == 0


def test_one_setting_fits_every_head_dim() -> None:
    c = choose_for_head_dims([256, 512], "bf16", capability=(12, 0), pass_="bwd")
    m, n = c.options["bwd_BLOCK_M1"], c.options["bwd_BLOCK_N1"]
    assert max(smem_bwd(m, n, 256, "bf16"), smem_bwd(m, n, 512, "bf16")) <= 101_376


@pytest.mark.parametrize(
    "message,expected",
    [
        (
            "out of resource: shared memory, Required: 106496, Hardware limit: 101376. "
            "Reducing block sizes or `num_stages` may help.",
            (106_496, 101_376),
        ),
        (
            "torch._inductor.exc.InductorError: RuntimeError: No valid triton configs. "
            "OutOfMemoryError: out of resource: triton_tem_fused_flex_attention_backward_1\n"
            "Required: 114688 Hardware limit:101376 Reducing block sizes",
            (114_688, 101_376),
        ),
        ("CUDA error: an illegal memory access", None),
    ],
)
def test_both_out_of_resource_forms_parse(message: str, expected: tuple[int, int] | None) -> None:
    assert parse_out_of_resource(message) == expected


def test_fallback_retries_smaller_blocks_and_reports() -> None:
    seen: list[dict[str, int]] = []

    def fake_kernel(opts: dict[str, int]) -> str:
        seen.append(opts)
        if not opts or opts["fwd_BLOCK_M"] * opts["fwd_BLOCK_N"] > 32 * 32:
            raise RuntimeError("out of resource: shared memory, Required: 102400, Hardware limit: 101376.")
        return "ok"

    result, log = run_with_smem_fallback(fake_kernel, 512, "bf16", "fwd")
    assert result == "ok" and seen[-1]["fwd_BLOCK_M"] == 32 and seen[-1]["fwd_BLOCK_N"] == 32
    assert "required 102,400 B" in log[0] and log[-1].endswith("ran")


def test_fallback_does_not_swallow_other_errors() -> None:
    def broken(opts: dict[str, int]) -> None:
        raise RuntimeError("illegal memory access")

    with pytest.raises(RuntimeError, match="illegal memory access"):
        run_with_smem_fallback(broken, 256, "bf16", "fwd")


# ---- recompile guard: the failure it prevents, and its prevention (dynamo with the eager backend
# traces, guards and counts recompiles exactly like inductor, without minutes of CPU codegen) ----

WIDTHS = [16 * i for i in range(1, 11)]  # 10 widths: more than the default limit of 8


def _run_widths(widths: list[int]) -> list[str]:
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.reset()
    compiled = torch.compile(flex_attention, backend="eager", dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t in widths:
            q = torch.randn(1, 2, t, 16)
            compiled(q, q, q)
    return [str(w.message) for w in caught]


@pytest.mark.slow
def test_without_guard_more_than_8_widths_fall_back_silently() -> None:
    assert torch._dynamo.config.recompile_limit == 8
    messages = _run_widths(WIDTHS)
    assert any(EAGER_FLEX_WARNING in m for m in messages)  # ran uncompiled, no error raised


@pytest.mark.slow
def test_guard_sized_for_the_widths_stays_compiled() -> None:
    with RecompileGuard(widths=tuple(WIDTHS)) as guard:
        assert torch._dynamo.config.recompile_limit == guard.limit >= len(WIDTHS)
        messages = _run_widths(WIDTHS)
    assert not any(EAGER_FLEX_WARNING in m for m in messages)
    assert torch._dynamo.config.recompile_limit == 8 and not torch._dynamo.config.fail_on_recompile_limit_hit


@pytest.mark.slow
def test_guard_too_small_raises_instead_of_falling_back() -> None:
    guard = RecompileGuard(widths=tuple(WIDTHS[:2]), margin=0)
    with guard, pytest.raises(TuneproofError, match="uncompiled eager"), loud_recompile_errors():
        _run_widths(WIDTHS)
    assert torch._dynamo.config.recompile_limit == 8


# ---- block masks against brute force ----


def _dense(bm) -> torch.Tensor:
    return bm.to_dense()


def test_sliding_block_mask_blocks() -> None:
    bm = sliding_block_mask(512, 128)
    dense = _dense(bm)[0, 0]  # (q blocks, kv blocks) of 128
    assert dense.shape == (4, 4)
    assert dense.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    assert sliding_block_mask(512, 128) is bm  # cached per width


def test_document_and_padding_masks_attend_only_where_allowed() -> None:
    from torch.nn.attention.flex_attention import flex_attention

    lengths = (100, 156)
    q = torch.randn(1, 2, 256, 16)
    got = flex_attention(q, q, q, block_mask=document_block_mask(lengths))
    first = torch.nn.functional.scaled_dot_product_attention(
        q[:, :, :100], q[:, :, :100], q[:, :, :100], is_causal=True
    )
    second = torch.nn.functional.scaled_dot_product_attention(
        q[:, :, 100:], q[:, :, 100:], q[:, :, 100:], is_causal=True
    )
    assert torch.allclose(got, torch.cat([first, second], dim=2), atol=1e-5)
    pad = padding_block_mask((256, 100), 256)
    assert _dense(pad)[1, 0].tolist() == [[1, 0], [1, 0]]  # second sequence: keys past 100 are never attended


@pytest.mark.slow
def test_enable_flex_switches_model_chooses_options_and_guards() -> None:
    from tuneproof.arch import resolve
    from tuneproof.attention.flex import enable_flex
    from tuneproof.measure.model import build_model

    # a small Gemma 4 with the CASE's head dims: 256 on sliding layers, 512 on global ones
    cfg = {
        "model_type": "gemma4_text",
        "hidden_size": 64,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 32,
        "hidden_size_per_layer_input": 0,
        "vocab_size": 64,
        "layer_types": ["sliding_attention", "full_attention"],
    }
    model = build_model(resolve(cfg), "sdpa")
    with enable_flex(
        model, widths=[256, 512, 1024], capability=(12, 0), dtype="bf16", training=True
    ) as setup:
        assert model.config._attn_implementation == "flex_attention"
        assert setup.kernel_options["fwd_BLOCK_M"] == 32 and setup.kernel_options["fwd_BLOCK_N"] == 32
        assert "bwd_BLOCK_M1" in setup.kernel_options
        assert torch._dynamo.config.recompile_limit == setup.guard.limit == 3 * 2 + 4
        assert torch._dynamo.config.fail_on_recompile_limit_hit
        hook = next(iter(model._forward_pre_hooks.values()))
        _, kwargs = hook(model, (), {})
        assert kwargs["kernel_options"] == setup.kernel_options
        assert any("recompile limit 10" in line for line in setup.describe())
    # everything undone: no hidden global state outlives the block
    assert model.config._attn_implementation == "sdpa" and not model._forward_pre_hooks
    assert torch._dynamo.config.recompile_limit == 8 and not torch._dynamo.config.fail_on_recompile_limit_hit


@pytest.mark.slow
def test_enable_flex_turns_dynamo_failure_into_the_tools_error_and_still_restores() -> None:
    from tuneproof.attention.flex import enable_flex
    from tuneproof.measure.model import build_model

    model = build_model(resolve({"model_type": "llama", **_LLAMA}), "sdpa")
    with (
        pytest.raises(TuneproofError, match="would fall back to uncompiled eager"),
        enable_flex(model, widths=[16]),
    ):
        raise torch._dynamo.exc.FailOnRecompileLimitHit("recompile_limit reached")
    assert model.config._attn_implementation == "sdpa"
    assert torch._dynamo.config.recompile_limit == 8


_LLAMA = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=64,
)


# ---- the default block sizes are torch's own ----------------------------------------------------


@pytest.mark.parametrize("cap", [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0)])
def test_default_blocks_match_torchs_heuristic_on_every_card(cap: tuple[int, int]) -> None:
    """Our table is data verified against the installed torch: its CUDAConfigHeuristic, asked as if the
    card were present (the capability is the only thing it reads from the device)."""
    from unittest import mock

    from torch._inductor.template_heuristics.triton import CUDAConfigHeuristic

    from tuneproof.attention.kernel_options import default_bwd, default_fwd

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    with mock.patch("torch.cuda.get_device_capability", return_value=cap):
        heuristic = CUDAConfigHeuristic()
        for head_dim in (16, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256, 320, 512):
            for name, dtype in dtypes.items():
                f = heuristic.get_flex_attn_fwd_configs(head_dim, dtype)[-1]
                b = heuristic.get_flex_attn_bwd_configs(head_dim, dtype)[-1]
                assert default_fwd(head_dim, name, cap) == (f.block_m, f.block_n, f.num_stages, f.num_warps)
                assert default_bwd(head_dim, name, cap) == (b.block_m1, b.block_n1, b.num_stages, b.num_warps)


@pytest.mark.parametrize(
    "cap,limit",
    [((8, 0), 166_912), ((8, 6), 101_376), ((8, 9), 101_376), ((9, 0), 232_448), ((10, 0), 232_448),
     ((11, 0), 101_376), ((12, 0), 101_376), ((12, 1), 101_376)],
)  # fmt: skip
def test_shared_memory_limit_per_card(cap: tuple[int, int], limit: int) -> None:
    from tuneproof.hardware.capability import smem_limit

    assert smem_limit(cap) == limit


def test_unknown_shared_memory_limit_is_refused() -> None:
    from tuneproof.hardware.capability import smem_limit

    with pytest.raises(TuneproofError, match=r"no shared-memory limit known for capability 6\.1"):
        smem_limit((6, 1))
    assert smem_limit((7, 0)) == 98_304 and smem_limit((7, 5)) == 65_536  # V100 (a recorded trace), T4


def test_kernel_choice_reasons_and_options_in_full() -> None:
    keep = choose_kernel_options(128, "bf16", capability=(9, 0), pass_="fwd")
    assert keep.options == {} and (keep.smem_bytes, keep.smem_limit) == (
        2 * (128 * 128 + 3 * 2 * 64 * 128),  # Q tile + 3 stages of K and V tiles
        232_448,
    )
    assert keep.reason == (
        "default 128x64 x 3 stages (fwd, head_dim 128, bf16) needs 131,072 B <= 232,448 B per block "
        "(capability 9.0): keep torch's defaults"
    )
    shrink = choose_kernel_options(512, "bf16", capability=(12, 0), pass_="fwd")
    assert shrink.options == {"fwd_BLOCK_M": 32, "fwd_BLOCK_N": 32, "fwd_num_stages": 1, "fwd_num_warps": 4}
    assert shrink.reason == (
        "default 64x32 x 3 stages (fwd, head_dim 512, bf16) needs 262,144 B > 101,376 B per block "
        "(capability 12.0); 32x32 x 1 stage needs 67,584 B"
    )
    bwd = choose_kernel_options(256, "bf16", smem_limit_bytes=100_000, pass_="bwd")
    assert bwd.options == {  # 64x32: 2 x (32x256 + 2x64x256 + 2x64x32) = 90,112 B fits 100,000
        "bwd_BLOCK_M1": 64,
        "bwd_BLOCK_N1": 32,
        "bwd_BLOCK_M2": 32,
        "bwd_BLOCK_N2": 64,
        "bwd_num_stages": 1,
        "bwd_num_warps": 4,
    }
    assert "(given limit)" in bwd.reason and (bwd.smem_bytes, bwd.smem_limit) == (90_112, 100_000)


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"head_dim": 0}, "head_dim must be >= 1"),
        ({"dtype": "fp8"}, "dtype 'fp8' is not known"),
        ({"pass_": "both"}, "pass_ 'both' is not known"),
        ({"capability": None}, "no device given"),
        (
            {"head_dim": 65536, "smem_limit_bytes": 1000},
            "no flex block size fits 1,000 B for head_dim 65536 bf16 fwd",
        ),
    ],
)
def test_kernel_choice_refusals(kw: dict, fragment: str) -> None:
    args = {"head_dim": 128, "dtype": "bf16", "capability": (9, 0), **kw}
    with pytest.raises(TuneproofError, match=re.escape(fragment)):
        choose_kernel_options(args.pop("head_dim"), args.pop("dtype"), **args)


def test_one_setting_for_all_head_dims_keeps_defaults_when_all_fit() -> None:
    c = choose_for_head_dims([64, 128], "bf16", capability=(9, 0), pass_="fwd")
    assert c.options == {} and c.reason.count("keep torch's defaults") == 2
    assert c.smem_bytes == max(
        choose_kernel_options(d, "bf16", capability=(9, 0)).smem_bytes for d in (64, 128)
    )
    mixed = choose_for_head_dims([256, 512], "bf16", capability=(12, 0), pass_="fwd")
    assert mixed.options["fwd_BLOCK_M"] == 32 and mixed.options["fwd_BLOCK_N"] == 32
    assert mixed.reason.endswith(
        "one setting for head_dims [256, 512]: 32x32 x 1 stage needs at most 67,584 B"
    )
    with pytest.raises(TuneproofError, match="no flex block size fits 1,000 B for head_dim 64 bf16 bwd"):
        choose_for_head_dims([64], "bf16", smem_limit_bytes=1000, pass_="bwd")


def test_fallback_log_names_each_try() -> None:
    calls = []

    def kernel(opts: dict[str, int]) -> int:
        calls.append(opts)
        if len(calls) < 3:
            raise RuntimeError("out of resource: shared memory, Required: 120000, Hardware limit: 101376.")
        return 7

    result, log = run_with_smem_fallback(kernel, 256, "bf16", "bwd", first={"bwd_BLOCK_M1": 64})
    assert result == 7 and calls[0] == {"bwd_BLOCK_M1": 64}
    assert (
        calls[1]["bwd_BLOCK_M1"] == 64 and calls[1]["bwd_BLOCK_N1"] == 64 and calls[2]["bwd_BLOCK_N1"] == 32
    )
    assert log[0] == (
        "{'bwd_BLOCK_M1': 64}: out of shared memory (required 120,000 B, limit 101,376 B); retrying smaller"
    )
    assert log[-1].endswith(": ran") and len(log) == 3
    with pytest.raises(TuneproofError, match="ran out of shared memory at every block size for head_dim 256"):
        run_with_smem_fallback(
            lambda o: (_ for _ in ()).throw(RuntimeError("out of resource: Required: 1 Hardware limit: 0")),
            256,
            "bf16",
            "bwd",
        )


def test_enable_flex_refuses_a_model_whose_class_does_not_support_flex() -> None:
    """Qwen3-Next (gated delta rule + full attention) sets _supports_flex_attn = False: transformers
    would raise deep inside set_attn_implementation; the tool says so first, model untouched."""
    from tiny_models import shrunk_config
    from tuneproof.arch import resolve
    from tuneproof.attention.flex import enable_flex
    from tuneproof.core.errors import TuneproofError
    from tuneproof.measure.model import build_model

    model = build_model(resolve(shrunk_config("qwen3_next")), "sdpa")
    with (
        pytest.raises(TuneproofError, match="_supports_flex_attn is False"),
        enable_flex(model, widths=[256, 512], capability=(12, 0), dtype="bf16"),
    ):
        pass
    assert model.config._attn_implementation == "sdpa"


H200_ERROR = (
    "torch._inductor.exc.InductorError: RuntimeError: No valid triton configs. OutOfMemoryError: out of "
    "resource: triton_tem_fused_flex_attention_0\nRequired: 262144 Hardware limit:232448 Reducing block "
    "sizes or `num_stages` may help."
)


def test_the_measured_path_takes_tritons_own_answer(tmp_path, monkeypatch) -> None:
    """A fake device: the injected compile step raises Triton's real error text for torch's defaults at
    head_dim 512 and for any 3-stage 64x32, and compiles everything else."""
    from tuneproof.attention.kernel_measure import choose_measured, measure

    monkeypatch.setenv("TUNEPROOF_CACHE", str(tmp_path))
    compiled: list[tuple[int, dict[str, int]]] = []

    def fake_compile(head_dim: int, dtype: str, pass_: str, options: dict[str, int]) -> None:
        compiled.append((head_dim, dict(options)))
        if head_dim == 512 and (not options or options.get("fwd_num_stages") == 3):
            raise RuntimeError(H200_ERROR)

    c = choose_measured(
        [256, 512], "bf16", "fwd", capability=(9, 0), compile_step=fake_compile, device_key="H200"
    )
    assert c.source == "measured" and c.options == {
        "fwd_BLOCK_M": 64, "fwd_BLOCK_N": 32, "fwd_num_stages": 2, "fwd_num_warps": 4,
    }  # fmt: skip
    assert "torch's defaults: needs 262,144 B > 232,448 B" in c.reason and "compiled and ran" in c.reason
    # cached per (device, head_dim, dtype, pass, options): asking again compiles nothing
    n = len(compiled)
    again = measure(512, "bf16", "fwd", {}, compile_step=fake_compile, device_key="H200")
    assert len(compiled) == n and again.cached and not again.fits and again.required == 262_144
    other = measure(512, "bf16", "fwd", {}, compile_step=lambda *a: None, device_key="another card")
    assert other.fits and not other.cached


def test_the_measured_path_lets_other_errors_through(tmp_path, monkeypatch) -> None:
    from tuneproof.attention.kernel_measure import measure

    monkeypatch.setenv("TUNEPROOF_CACHE", str(tmp_path))

    def broken(*args: object) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access"):
        measure(256, "bf16", "fwd", {}, compile_step=broken, device_key="x")


def test_without_a_device_every_answer_says_estimated() -> None:
    from tuneproof.attention.kernel_measure import best_choice

    c = best_choice([256, 512], "bf16", (9, 0), "fwd")
    assert c.source == "estimated" and c.options["fwd_num_stages"] == 2


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"capability": 9.0}, "capability 9.0 is not (major, minor)"),
        ({"capability": "9.0"}, "capability '9.0' is not (major, minor)"),
        ({"capability": (9,)}, "is not (major, minor)"),
        ({"smem_limit_bytes": "100000"}, "smem_limit_bytes must be an integer"),
        ({"smem_limit_bytes": 0}, "smem_limit_bytes must be >= 1"),
        ({"smem_limit_bytes": 100000.5}, "smem_limit_bytes must be an integer"),
    ],
)
def test_bad_devices_are_tuneproof_errors(kw: dict, fragment: str) -> None:
    with pytest.raises(TuneproofError, match=re.escape(fragment)):
        choose_kernel_options(256, "bf16", **kw)


@pytest.mark.parametrize(
    "dims,fragment",
    [([], "no head_dims given"), (256, "is not a list"), ([256, "x"], "head_dim must be an integer")],
)
def test_bad_head_dim_lists_are_tuneproof_errors(dims: object, fragment: str) -> None:
    with pytest.raises(TuneproofError, match=re.escape(fragment)):
        choose_for_head_dims(dims, "bf16", capability=(9, 0))  # type: ignore[arg-type]


def test_bf16_below_sm80_is_refused_by_the_memory_efficient_backend() -> None:
    from contexts import context
    from tuneproof.arch.shape import AttentionSpec
    from tuneproof.attention.dispatch import predict

    # equal heads: transformers' GQA call would stop at the memory-efficient kernel's head check first
    spec = AttentionSpec(kind="full", window=None, num_heads=32, num_kv_heads=32, head_dim=128,
                         v_head_dim=128)  # fmt: skip
    for cap, arch in (((7, 5), "sm75"), ((7, 0), "sm70")):
        _, _, backend, refused, kernel = predict(
            context(seq_len=4096, batch=1, capability=cap, dtype="bf16"), spec
        )
        assert backend == "math" and "bf16 below sm80" in refused["efficient"]
        _, _, backend, _, kernel = predict(context(seq_len=4096, batch=1, capability=cap, dtype="fp16"), spec)
        assert backend == "efficient" and kernel.endswith(f"_{arch} (kMaxK 128)")


def test_explaining_flex_names_its_kernel_options() -> None:
    from contexts import context
    from tuneproof.arch import resolve
    from tuneproof.attention.dispatch import explain

    shape = resolve(str(Path(__file__).parent.parent / "data" / "configs" / "gemma-4-26b-a4b.json")).shape
    e = explain(
        shape,
        context(seq_len=8192, batch=1, attn="flex_attention", capability=(9, 0), training=True),
        live=False,
    )
    flex = [a for a in e.advice if a.startswith("flex_attention: pass kernel_options")]
    assert len(flex) == 1 and "'fwd_num_stages': 2" in flex[0] and "estimated" in flex[0]


def test_the_explainers_json_carries_the_kernel_options_as_data() -> None:
    from contexts import context
    from tuneproof.arch import resolve
    from tuneproof.attention.dispatch import explain

    shape = resolve(str(Path(__file__).parent.parent / "data" / "configs" / "gemma-4-26b-a4b.json")).shape
    d = explain(shape, context(seq_len=8192, batch=1, capability=(9, 0), training=True), live=False).to_dict()
    fwd = d["flex_kernel_options"]["fwd"]
    assert (
        fwd["options"]["fwd_num_stages"] == 2
        and fwd["smem_bytes"] == 196_608
        and fwd["source"] == "estimated"
    )
    assert set(d["flex_kernel_options"]) == {"fwd", "bwd"}
    assert explain(shape, context(seq_len=8192, batch=1), live=False).to_dict()["flex_kernel_options"] is None


def test_estimated_kernel_options_say_where_they_are_unverified() -> None:
    """The stage model against torch's own tuned defaults: where it says one overflows and no card has
    reported that configuration's size, the choice says "unverified"; a size a card reported is not; and
    inductor's one-stage retry is named wherever a pipelined default is past the limit."""
    from tuneproof.attention.kernel_options import RETRY, caveats

    sm80 = caveats([256], "bf16", (8, 0), "fwd", 166_912)
    assert sm80[0].startswith("unverified: the estimate says torch's own fwd default 32x64 x 3 stages")
    assert "212,992 B > 166,912 B" in sm80[0] and sm80[-1] == RETRY
    assert caveats([512], "bf16", (9, 0), "fwd", 232_448) == [RETRY]  # an H200 reported 64x32 x 3
    assert caveats([256], "bf16", (12, 0), "bwd", 101_376) == []  # pytorch#198224's 1-stage size, no retry
    assert caveats([128], "bf16", (9, 0), "fwd", 232_448) == []  # fits: nothing to say
