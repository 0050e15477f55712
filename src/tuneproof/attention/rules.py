"""Predicted SDPA dispatch rules, as data. Each rule cites the file and function it encodes.

Verified against PyTorch 2.13.0 and transformers 5.24.0 (docs/sources.md);
for other versions the explainer still predicts with these rules and says so.
"""

from __future__ import annotations

VERIFIED_TORCH = "2.13"
VERIFIED_TRANSFORMERS = "5.24"

# transformers' mask decisions live with the attention paths (tuneproof.attention.paths.MASK_SOURCES).

# PyTorch SDPA on CUDA: the chooser's gates and priority live in `tuneproof.attention.sdpa_cuda`.
FLASH_MAX_HEAD_DIM = 256  # check_head_dim_size_flash (CUDA; ROCm differs)

SOURCES = {  # the CUDA chooser's sources are its gates' own (attention/sdpa_cuda.py GATES)
    "cpu": "sdp_utils_cpp.cpp priority_order_cpp: flash for CPU (accepts masks; no dropout), then math",
}


def cpu_refusal(dropout: float, d_qk: int, d_v: int) -> str | None:
    """Why SDPA's CPU flash kernel is not used (sdp_utils_cpp.cpp use_flash_attention_cpp), or None:
    dropout passed (check_for_dropout), q/k and v head_dims differ (check_head_dim_size_cpp)."""
    if dropout > 0:
        return (
            f"dropout {dropout:g} in training (sdp_utils_cpp.h check_for_dropout: 'Both fused kernels do not "
            "support non-zero dropout.')"
        )
    if d_qk != d_v:
        return f"head_dims differ, q/k {d_qk} and v {d_v} (sdp_utils_cpp.h check_head_dim_size_cpp)"
    return None


# The kernel each SDPA backend runs (the memory-efficient one by head_dim tier: `efficient_kernel`).
SDPA_KERNELS = {
    "flash": "FlashAttention-2 (pytorch_flash::flash_fwd/bwd kernels)",
    "cudnn": "cuDNN SDPA (cudnn_generated_fort_native_sdpa*)",
    "math": "math: aten matmul + softmax, the full score matrix materialised",
    "cpu_flash": "flash attention for CPU (aten::_scaled_dot_product_flash_attention_for_cpu)",
}


def sdpa_kernel(backend: str, head_dim: int, capability: tuple[int, int] = (8, 0)) -> str:
    """The kernel SDPA's `backend` runs for `head_dim`."""
    return efficient_kernel(head_dim, capability) if backend == "efficient" else SDPA_KERNELS[backend]


def efficient_kernel(head_dim: int, capability: tuple[int, int] = (8, 0)) -> str:
    """Memory-efficient forward kernel tier (mem_eff_attention/kernels/cutlassF.h): built for sm50, sm70,
    sm75 and sm80, each card running the newest at or below its capability (sm80's on every later one)."""
    arch = (
        "sm80"
        if capability >= (8, 0)
        else "sm75"
        if capability >= (7, 5)
        else "sm70"
        if capability >= (7, 0)
        else "sm50"
    )
    if head_dim <= 64:
        return f"memory-efficient fmha_cutlassF_*_64x64_rf_{arch} (kMaxK 64)"
    if head_dim <= 128:  # generate_kernels.py: (64 if sm > 75 else 32, 128, 128)
        q = 64 if arch == "sm80" else 32
        return f"memory-efficient fmha_cutlassF_*_{q}x128_rf_{arch} (kMaxK 128)"
    return (
        f"memory-efficient fmha_cutlassF_*_32x128_gmem_{arch} (kMaxK 65536): the gmem tier for head_dim > "
        "128, its slowest"
    )
