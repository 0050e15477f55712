"""The kernel-class rule table against real kernel names: every name below is read from a checked-in
trace (DeepSeek-V3 on an H800, HolisticTraceAnalysis's MI250 and sampled-rank traces, the zoo), except
the few marked as taken from a library's source, for families no public trace here holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuneproof.measure.kernels import _table
from tuneproof.trace.kernel_classes import CLASSES, RULES, classify, rule_of
from tuneproof.trace.read import load_trace

DATA = Path(__file__).parent.parent / "data"


def _names(path: Path) -> set[str]:
    events = load_trace(path).events
    return {e["name"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}


def _by_prefix(names: set[str], prefix: str) -> list[str]:
    found = sorted(n for n in names if n.startswith(prefix))
    assert found, prefix
    return found


DEEPSEEK = _names(DATA / "deepseek_v3_train_h800.json.gz")
AMD = _names(DATA / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
SAMPLED = _names(DATA / "hta" / "sampled_rank-0.json.gz")
ZOO = _names(DATA / "zoo_sm90.json.gz")
COMPILED_MI300X = _names(DATA / "tracelens" / "torch_compile_triton_mi300x.json.gz")
SGLANG_MI300X = _names(DATA / "tracelens" / "sglang_qwen3_8b_decode_mi300x.json.gz")

REAL: list[tuple[str, str]] = [
    *((n, "communication") for n in _by_prefix(DEEPSEEK, "void dpsk::ep::internode::")),
    *((n, "communication") for n in _by_prefix(DEEPSEEK, "void dpsk::ep::cuda::get_dispatch_layout")),
    *((n, "grouped_gemm") for n in _by_prefix(DEEPSEEK, "void cutlass::device_kernel<dpsk::grouped_gemm::")),
    *((n, "other") for n in _by_prefix(DEEPSEEK, "void dpsk::grouped_gemm::cuda::utils::")),
    *((n, "attention") for n in _by_prefix(DEEPSEEK, "void cutlass::device_kernel<flash::FlashAttnBwd")),
    *((n, "attention") for n in _by_prefix(DEEPSEEK, "void flash::compute_attn_ws<")),
    *((n, "gemm") for n in _by_prefix(DEEPSEEK, "sm90_xmma_gemm_")),
    *((n, "memory") for n in _by_prefix(DEEPSEEK, "Memcpy DtoD")),
    *((n, "other") for n in _by_prefix(DEEPSEEK, "void layer_norm::")),
    *((n, "gemm") for n in _by_prefix(AMD, "Cijk_")),
    *((n, "memory") for n in _by_prefix(AMD, "Memcpy HtoD")),
    *((n, "other") for n in _by_prefix(AMD, "void at::native::reduce_kernel")),
    *((n, "communication") for n in _by_prefix(SAMPLED, "ncclKernel_SendRecv")),
    *((n, "gemm") for n in _by_prefix(SAMPLED, "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm")),
    *((n, "gemm") for n in _by_prefix(SAMPLED, "ampere_sgemm")),
    # fbgemm_gpu's embedding kernels name the namespace, not a GEMM
    *((n, "other") for n in _by_prefix(SAMPLED, "void split_embedding_codegen_forward")),
    *((n, "other") for n in _by_prefix(SAMPLED, "void fbgemm_gpu::permute_2D")),
    *((n, "gemm") for n in _by_prefix(SAMPLED, "void gemvNSP_kernel")),
    *((n, "gemm") for n in _by_prefix(SAMPLED, "void gemmk1_kernel")),
    *((n, "attention") for n in _by_prefix(ZOO, "flash_fwd_kernel<")),
    *(
        (n, "attention")
        for n in _by_prefix(ZOO, "void flash::flash_fwd_kernel<cute::tuple>(FlashAttnFwdSm90)")
    ),
    *((n, "attention") for n in _by_prefix(ZOO, "fmha_cutlassB")),
    *((n, "attention") for n in _by_prefix(ZOO, "cudnn_generated_fort_native_sdpa")),
    *((n, "attention") for n in _by_prefix(ZOO, "triton_tem_fused_flex_attention")),
    *((n, "gemm") for n in _by_prefix(ZOO, "nvjet_")),
    *((n, "grouped_gemm") for n in _by_prefix(ZOO, "void at::cuda::detail::grouped_mm_kernel")),
    *((n, "communication") for n in _by_prefix(ZOO, "ncclDevKernel_AllReduce")),
    *((n, "memory") for n in _by_prefix(ZOO, "Memset")),
    # ROCm: SDPA's flash (AOTriton, a Triton kernel) under torch.compile, and vLLM's paged attention
    *((n, "attention") for n in _by_prefix(COMPILED_MI300X, "attn_fwd")),
    *((n, "other") for n in _by_prefix(COMPILED_MI300X, "triton_poi_fused__unsafe_view_mul_silu")),
    *((n, "attention") for n in _by_prefix(SGLANG_MI300X, "void paged_attention_ll4mi_QKV_mfma16_kernel")),
]

# families without a public trace here: names as their libraries write them
FROM_SOURCE = [
    ("c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 8>", "communication"),  # torch
    ("void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 8>", "communication"),  # torch
    ("nvshmemi_transfer_rma_kernel", "communication"),  # NVSHMEM
    ("void deep_ep::internode_ll::dispatch<3, 7168>", "communication"),  # DeepEP (pip deep_ep)
    ("triton_tem_fused_flex_attention_backward_3", "attention"),  # inductor flex backward
    ("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object", "attention"),
    ("ck_tile::kentry<fmha_fwd_d128_bf16_batch_b128x128x32>", "attention"),  # CK-tile
    ("aiter::mha_fwd_kernel", "attention"),  # aiter
    ("bwd_kernel_dk_dv", "attention"),  # AOTriton backward (SDPA flash on ROCm)
    ("_attn_bwd_preprocess", "attention"),  # the Triton tutorial's fused attention
    ("fused_moe_kernel", "grouped_gemm"),  # vLLM / SGLang triton MoE
    ("void deep_gemm::fp8_gemm_kernel<m_grouped_contiguous>", "grouped_gemm"),  # DeepGEMM m-grouped
    ("void deep_gemm::fp8_gemm_kernel<normal>", "gemm"),  # DeepGEMM dense
    ("cutlass::gemm::kernel::GroupedGemmKernel", "grouped_gemm"),  # CUTLASS grouped
    ("triton_tem_fused_addmm_0", "gemm"),  # inductor GEMM template
]


@pytest.mark.parametrize("name,cls", REAL + FROM_SOURCE, ids=lambda x: str(x)[:50])
def test_real_names(name: str, cls: str) -> None:
    assert classify(name) == cls


def test_every_rule_has_a_source_and_a_known_class() -> None:
    for cls, pattern, source in RULES:
        assert cls in CLASSES and pattern and len(source) > 5


def test_every_rule_is_exercised() -> None:
    """Each device-kernel rule is hit by a test vector (the operator-row rules by
    tests/measure/test_kernels.py)."""
    hit = {rule_of(n) for n, _ in REAL + FROM_SOURCE}
    missing = [RULES[i][2] for i in range(len(RULES)) if i not in hit and "operator rows" not in RULES[i][2]]
    assert missing == []


def test_triton_attention_in_a_real_compiled_trace_is_attention() -> None:
    """AMD-AGI/TraceLens's torch.compile trace on an MI300X: AOTriton's attn_fwd, launched by
    aten::_flash_attention_forward, is 29.4 % of kernel time; it was filed under "other" (attention 0)."""
    t = _table(load_trace(DATA / "tracelens" / "torch_compile_triton_mi300x.json.gz"), 5)
    assert t.ms["attention"] / t.total_ms == pytest.approx(0.294, abs=0.001)
    assert not any(n == "attn_fwd" for n, _, _ in t.unclassified)


def test_unclassified_above_one_percent_are_named() -> None:
    t = _table(load_trace(DATA / "hta" / "sampled_rank-0.json.gz"), 5)
    named = {n.split("<")[0] for n, _, _ in t.unclassified}
    assert {
        "void permute_pooled_embs_kernel",
        "void split_embedding_codegen_forward_unweighted_kernel",
    } <= named
    assert all(ms / t.total_ms > 0.01 for _, ms, _ in t.unclassified)
    # a matched name in "other" (the grouped-GEMM helpers) is classified, not unclassified
    ds = _table(load_trace(DATA / "deepseek_v3_train_h800.json.gz"), 5)
    assert not any("grouped_gemm::cuda::utils" in n for n, _, _ in ds.unclassified)


def test_an_instinct_part_gets_its_gfx_arch_from_its_name() -> None:
    """HIP reports 9.4 for an MI300X and the trace carries no gcnArchName: the name says gfx942."""
    from tuneproof.measure.kernels import ranked_table

    t = ranked_table(None, load_trace(DATA / "tracelens" / "torch_compile_triton_mi300x.json.gz"), 5)
    assert t.device is not None and t.device["arch"] == "gfx942"
    assert "(ROCm, gfx942)" in t.device["description"]
