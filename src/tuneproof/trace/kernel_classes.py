"""Kernel classes: one table of name rules, each with the library or trace it comes from.

A rule is (class, pattern, source), matched with `re.search` on the lower-cased kernel (or CPU
operator) name. Ordering rule: the first match wins, so
- communication comes first: NCCL's and DeepEP's kernels copy and reduce, and DeepEP's live in
  CUTLASS-style namespaces;
- attention comes before the GEMM classes: FlashAttention 3, cuDNN SDPA and CUTLASS fmha are CUTLASS or
  cuDNN kernels too (`cutlass::device_kernel<flash::FlashAttnBwd...>`);
- memory before the GEMMs (a `Memcpy` is never a GEMM, some copy kernels mention `gemm` templates);
- grouped GEMM (MoE experts) before dense GEMM: grouped kernels are CUTLASS/cuBLAS kernels too.
A name no rule matches is "other" and unclassified: the kernel table names every unclassified kernel
above `UNCLASSIFIED_FLOOR` of kernel time rather than hiding it in "other".

The test vectors are real names: tests/trace/test_kernel_classes.py reads them from the DeepSeek-V3 H800
trace, HolisticTraceAnalysis's AMD MI250 and sampled-rank traces and tests/data/zoo_sm90.json.gz.
"""

from __future__ import annotations

import re

CLASSES = ("attention", "gemm", "grouped_gemm", "communication", "memory", "other")
UNCLASSIFIED_FLOOR = 0.01  # an unmatched name above 1 % of summed kernel time is named in the output

RULES: tuple[tuple[str, str, str], ...] = (
    # -- communication --
    (
        "communication",
        r"nccldevkernel_|ncclkernel_|nccl",
        "NCCL >= 2.19 ncclDevKernel_*, older ncclKernel_*; RCCL keeps these names",
    ),
    ("communication", r"dpsk::ep::|deep_ep", "DeepEP (dpsk::ep::internode::dispatch/combine/notify...)"),
    ("communication", r"nvshmem", "NVSHMEM device kernels (nvshmemi_*, used by DeepEP's low-latency mode)"),
    (
        "communication",
        r"symm_mem|symmetric_memory|two_shot_all_reduce|one_shot_all_reduce|multimem_|all_to_all_vdev",
        "torch.distributed._symmetric_memory CUDA kernels (SymmetricMemory.cu, CUDASymmetricMemoryOps.cu)",
    ),
    (
        "communication",
        r"c10d::|allreduce|all_reduce|allgather|all_gather|reduce_scatter|alltoall|all_to_all",
        "c10d CPU operator rows (c10d::allreduce_, record_param_comms names)",
    ),
    # -- attention --
    (
        "attention",
        r"flash_fwd|flash_bwd|flash::|flashattn|flash_attn",
        "FlashAttention 2 (flash_fwd_kernel), 3 (FlashAttnFwdSm90), 4 (cute-dsl flash_attn.cute)",
    ),
    ("attention", r"fmha", "CUTLASS/xformers fmha (SDPA mem-efficient fmha_cutlassF/B), CK fmha_fwd/bwd"),
    (
        "attention",
        r"cudnn.*sdpa|sdpa.*cudnn|fort_native_sdpa",
        "cuDNN SDPA (cudnn_generated_fort_native_sdpa_*)",
    ),
    (
        "attention",
        r"flex_attention|flex_decoding",
        "flex: triton_tem_fused_flex_attention(_backward), flex_decoding; the CPU flex HOP",
    ),
    ("attention", r"aiter.*(mha|attn|paged)|ck_tile.*fmha", "AMD aiter / CK-tile attention kernels"),
    (
        "attention",
        r"(^|_)attn_(fwd|bwd)|^_?bwd_(kernel_(dk_dv|dq|fuse)|preprocess|postprocess)",
        "Triton attention by what it computes: AOTriton's attn_fwd / bwd_kernel_dk_dv / bwd_kernel_dq / "
        "bwd_preprocess (SDPA's flash and memory-efficient backends on ROCm, launched by "
        "aten::_flash_attention_forward; AMD-AGI/TraceLens tests/traces/torch_compile_triton), the Triton "
        "tutorial's _attn_fwd / _attn_bwd",
    ),
    ("attention", r"paged_attention", "vLLM paged attention (paged_attention_v1/v2, ROCm ll4mi kernels)"),
    (
        "attention",
        r"scaled_dot_product|_efficient_attention|_flash_attention|attention_for_cpu",
        "aten SDPA operator rows",
    ),
    # -- memory --
    ("memory", r"memcpy|memset", "CUDA/HIP runtime copies (Memcpy HtoD, hipMemcpy, Memset)"),
    (
        "memory",
        r"^aten::(copy_|_to_copy|fill_|zero_|clone|contiguous)$",
        "aten copy operator rows",
    ),
    # -- grouped GEMM (MoE experts) --
    ("other", r"dpsk::grouped_gemm::cuda::utils::", "DeepSeek grouped-GEMM helpers (transpose, tensormaps)"),
    (
        "grouped_gemm",
        r"grouped_mm|grouped_gemm|groupedgemm|m_grouped|k_grouped|moe_gemm|fused_moe_kernel",
        "torch._grouped_mm (grouped_mm_kernel), DeepGEMM m_grouped_*, dpsk::grouped_gemm, CUTLASS grouped, "
        "triton fused_moe_kernel (vLLM/SGLang)",
    ),
    # -- dense GEMM --
    ("gemm", r"nvjet|sm\d+_xmma|xmma_gemm|cublas", "cuBLAS / cuBLASLt (nvjet_*, sm90_xmma_gemm_*)"),
    ("gemm", r"^cijk_|hipblaslt|tensile", "hipBLASLt / Tensile (Cijk_Ailk_Bljk_...)"),
    ("gemm", r"deep_gemm|fp8_gemm", "DeepGEMM dense (deep_gemm::fp8_gemm_kernel)"),
    (
        "gemm",
        r"(?<!fb)gemm|gemv|cutlass|tensorop",
        "CUTLASS (cutlass_80_tensorop_*), cuBLAS's ampere_sgemm/gemvx/gemmk1; not the fbgemm_gpu namespace, "
        "which names embedding kernels (HTA's sampled_rank traces)",
    ),
    ("gemm", r"triton_tem_fused_(mm|addmm|bmm)", "inductor GEMM templates"),
    (
        "gemm",
        r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|addmv|mv|dot)$",
        "aten GEMM operator rows",
    ),
)
_COMPILED = tuple((cls, re.compile(p)) for cls, p, _ in RULES)
assert all(cls in CLASSES for cls, _, _ in RULES)


def rule_of(name: str) -> int | None:
    """Index in `RULES` of the first rule matching `name`, None when no rule does."""
    n = name.lower()
    for i, (_, pattern) in enumerate(_COMPILED):
        if pattern.search(n):
            return i
    return None


def classify(name: str) -> str:
    """The class of a kernel or CPU operator name; "other" when no rule matches."""
    i = rule_of(name)
    return "other" if i is None else _COMPILED[i][0]
