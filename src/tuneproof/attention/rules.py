"""Predicted SDPA dispatch rules, as data. Each rule cites the file and function it encodes.

Verified against PyTorch 2.13.0 and transformers 5.24.0 (docs/sources.md);
for other versions the explainer still predicts with these rules and says so.
"""

from __future__ import annotations

VERIFIED_TORCH = "2.13"
VERIFIED_TRANSFORMERS = "5.24"

# transformers' mask decisions live with the attention paths (tuneproof.attention.paths.MASK_SOURCES).

# PyTorch SDPA on CUDA: default priority (ATen/Context.h) and the cuDNN preference
# (cuda/sdp_utils.cpp check_prefer_cudnn_attention: cuDNN > 9.15.0 and major 9 or 10).
CUDA_PRIORITY = ("flash", "efficient", "math", "cudnn")
CUDA_PRIORITY_CUDNN_FIRST = ("cudnn", "flash", "efficient", "math")
CUDNN_PREFERRED_MAJORS = (9, 10)
FLASH_CAPABILITY = ((8, 0), (12, 1))  # check_flash_attention_hardware_support: sm80-sm121
EFFICIENT_CAPABILITY = ((5, 0), (12, 1))  # check_mem_efficient_hardware_support: sm50-sm121
CUDNN_CAPABILITY = ((8, 0), (12, 1))
FLASH_MAX_HEAD_DIM = 256  # check_head_dim_size_flash (CUDA; ROCm differs)
CUDNN_HEAD_DIM_DEFAULT = (
    128  # check_cudnn_tensor_shapes; 256 on 9.0/10.x with cuDNN > 9.22 + frontend >= 1.24
)
# check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120: training, head_dim in (192, 224]
FLASH_TRAINING_GT192_CAPS = ((8, 6), (8, 7), (8, 9), (12, 0), (12, 1))

SOURCES = {
    "flash_mask": "sdp_utils_cpp.h check_for_attn_mask: "
    "'Flash Attention does not support non-null attn_mask.'",
    "flash_head_dim": "cuda/sdp_utils.cpp check_head_dim_size_flash: q,k,v last dims equal and <= 256",
    "flash_capability": "cuda/sdp_utils.cpp check_flash_attention_hardware_support: sm80-sm121",
    "flash_dtype": "cuda/sdp_utils.cpp check_dtypes_flash_attention: fp16/bf16 only",
    "flash_gt192": "cuda/sdp_utils.cpp check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120",
    "efficient_capability": "cuda/sdp_utils.cpp check_mem_efficient_hardware_support: sm50-sm121",
    "efficient_dtype": "cuda/sdp_utils.cpp use_mem_efficient_attention: less_than_sm80_mem_efficient_dtypes "
    "are fp16 and fp32 (bf16 from sm80)",
    "efficient_align": "cuda/sdp_utils.cpp check_head_dim_size_mem_efficient: head_dim a multiple of 8 "
    "(fp16/bf16) or 4 (fp32)",
    "cudnn_capability": "cuda/sdp_utils.cpp can_use_cudnn_attention: sm80-sm121",
    "cudnn_head_dim": "cuda/sdp_utils.cpp check_cudnn_tensor_shapes: head_dim <= 128 (256 only on 9.0/10.x "
    "with cuDNN > 9.22 and cudnn-frontend >= 1.24)",
    "cudnn_preference": "cuda/sdp_utils.cpp check_prefer_cudnn_attention: cuDNN first only on major 9 or 10 "
    "(and cuDNN > 9.15.0); otherwise it comes after math and is never reached",
    "cpu": "sdp_utils_cpp.cpp priority_order_cpp: flash for CPU (accepts masks; no dropout), then math",
}


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
    if head_dim <= 128:
        return f"memory-efficient fmha_cutlassF_*_64x128_rf_{arch} (kMaxK 128)"
    return (
        f"memory-efficient fmha_cutlassF_*_32x128_gmem_{arch} (kMaxK 65536): the gmem tier for head_dim > "
        "128, its slowest"
    )
