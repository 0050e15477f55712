"""PyTorch's SDPA backend choice on CUDA, as `select_sdp_backend` makes it: the priority order, then each
backend's gates in the order `can_use_*_attention` runs them, the first failing gate giving the reason.
Transcribed from `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp` and `sdp_utils_cpp.h`; each gate
names its function and the versions it holds for (the stack it reads: `tuneproof.attention.stack`).

What SDPA receives is what transformers hands it (`integrations/sdpa_attention.py`, 5.24): K/V keep
their kv heads with `enable_gqa=True` only when no mask is passed and head_dim(k) == head_dim(v) <= 256
(`use_gqa_in_sdpa`), else `repeat_kv` copies them to the query heads; `dropout_p` is the config's
`attention_dropout` in training and 0 otherwise; `is_causal` is set only without a mask.

Gates not modelled, because a training run of a decoder never trips them: nested tensors, runtime-disabled
backends (`sdpa_kernel`), deterministic mode, storage-offset alignment, zero-length and non-square causal
sequences, key length 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuneproof.attention.stack import Stack
from tuneproof.core.dtypes import LOW_PRECISION


@dataclass(kw_only=True, frozen=True, slots=True)
class SdpaCall:
    """One `scaled_dot_product_attention` call as SDPA's chooser sees it."""

    capability: tuple[int, int]
    dtype: str  # bf16 | fp16 | fp32
    d_qk: int
    d_v: int
    mask: bool  # an explicit attn_mask
    dropout: float  # dropout_p as passed (0 unless training)
    training: bool  # inputs require grad
    heads: int
    kv_heads: int  # as passed: the query heads after repeat_kv
    enable_gqa: bool
    stack: Stack
    batch: int = 1

    @property
    def cap(self) -> str:
        return f"{self.capability[0]}.{self.capability[1]}"

    @property
    def sm90_or_sm10x(self) -> bool:
        major, minor = self.capability
        return (major == 9 and minor == 0) or major == 10

    @property
    def cudnn_d256(self) -> bool:
        """check_cudnn_tensor_shapes / check_cudnn_d256_bprop_head_dim: head_dim 256 on cuDNN."""
        cudnn = self.stack.cudnn or 0
        sm107_too_old = self.capability == (10, 7) and cudnn <= 92500
        return self.sm90_or_sm10x and not sm107_too_old and cudnn > 92200 and self.stack.frontend_d256


def sdpa_call(
    capability: tuple[int, int], dtype: str, d_qk: int, d_v: int, mask: bool, dropout: float,
    training: bool, heads: int, kv_heads: int, stack: Stack, batch: int = 1,
) -> SdpaCall:  # fmt: skip
    """The call transformers makes for a layer: GQA kept only without a mask and with equal head_dims
    up to 256 (use_gqa_in_sdpa), dropout only in training."""
    gqa = kv_heads != heads and not mask and d_qk == d_v <= 256
    return SdpaCall(
        capability=capability, dtype=dtype, d_qk=d_qk, d_v=d_v, mask=mask,
        dropout=dropout if training else 0.0, training=training, heads=heads,
        kv_heads=kv_heads if gqa else heads, enable_gqa=gqa, stack=stack, batch=batch,
    )  # fmt: skip


def _in(cap: tuple[int, int], low: tuple[int, int], high: tuple[int, int]) -> bool:
    return low <= cap <= high


def minimum_gemm_alignment(capability: tuple[int, int], dtype: str) -> int:
    """sdp_utils.cpp minimum_gemm_alignment: 4 from sm80 (8 for 16-bit types, tensor cores), 8 for
    16-bit types on sm7x (tensor cores), 1 otherwise (fp32 on sm7x, every type below sm70)."""
    half = dtype in LOW_PRECISION
    major = capability[0]
    tensor_cores = major >= 8 or (major >= 7 and half)
    alignment = 4 if major >= 8 else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


# -- flash (can_use_flash_attention, in its gate order) ----------------------------------------------------


def _flash_mask(c: SdpaCall) -> str | None:
    return "explicit attn_mask ('Flash Attention does not support non-null attn_mask.')" if c.mask else None


def _flash_head_dim(c: SdpaCall) -> str | None:
    if c.d_qk != c.d_v:
        return f"head_dims differ (q/k {c.d_qk}, v {c.d_v}): flash needs them equal"
    return None if c.d_qk <= 256 else f"head_dim {c.d_qk} > 256"


def _flash_hardware(c: SdpaCall) -> str | None:
    return None if _in(c.capability, (8, 0), (12, 1)) else f"capability {c.cap} outside sm80-sm121"


def _flash_gt192(c: SdpaCall) -> str | None:
    on = _in(c.capability, (8, 6), (8, 9)) or _in(c.capability, (12, 0), (12, 1))
    if not (c.training and on):
        return None
    if c.d_qk <= 192 or (c.dropout == 0 and c.d_qk > 224):
        return None
    why = "in (192, 224]" if c.d_qk <= 224 else f"in (224, 256] with dropout {c.dropout:g}"
    return f"training with head_dim {c.d_qk} {why} on {c.cap}"


def _flash_dtype(c: SdpaCall) -> str | None:
    return None if c.dtype in LOW_PRECISION else f"{c.dtype}: flash takes fp16/bf16 only"


# -- memory-efficient (can_use_mem_efficient_attention) ----------------------------------------------------


def _efficient_hardware(c: SdpaCall) -> str | None:
    return None if _in(c.capability, (5, 0), (12, 1)) else f"capability {c.cap} outside sm50-sm121"


def _efficient_alignment(c: SdpaCall) -> str | None:
    align = minimum_gemm_alignment(c.capability, c.dtype)
    if c.d_qk % align == 0 and c.d_v % align == 0:
        return None
    return f"head_dim {c.d_qk}/{c.d_v} not a multiple of {align} ({c.dtype} on {c.cap})"


def _efficient_gqa(c: SdpaCall) -> str | None:
    if not c.enable_gqa or c.stack.torch >= (2, 14):
        return None
    return (
        f"enable_gqa with {c.heads} query / {c.kv_heads} kv heads: before torch 2.14 the memory-efficient "
        f"kernel takes only equal head counts (torch {c.stack.torch[0]}.{c.stack.torch[1]})"
    )


def _efficient_dtype(c: SdpaCall) -> str | None:
    if c.dtype == "bf16" and c.capability < (8, 0):
        return f"bf16 below sm80 ({c.cap}): fp16/fp32 only"
    return None


# -- cuDNN (can_use_cudnn_attention) ------------------------------------------------------------------------


def _cudnn_version(c: SdpaCall) -> str | None:
    cudnn = c.stack.cudnn
    if cudnn is None or cudnn < 90000:
        return f"cuDNN {c.stack.cudnn_text()}: cuDNN attention needs 9.0 or newer"
    if c.dropout > 0 and 91100 < cudnn < 91400:
        return f"dropout on cuDNN {c.stack.cudnn_text()} (no dropout in SDPA above 9.11.0 and below 9.14)"
    return None


def _cudnn_dtype(c: SdpaCall) -> str | None:
    return None if c.dtype in LOW_PRECISION else f"{c.dtype}: cuDNN attention takes fp16/bf16 only"


def _cudnn_hardware(c: SdpaCall) -> str | None:
    return None if _in(c.capability, (8, 0), (12, 1)) else f"capability {c.cap} outside sm80-sm121"


def _cudnn_dropout(c: SdpaCall) -> str | None:
    if c.dropout * 16 == int(c.dropout * 16):
        return None
    return f"dropout {c.dropout:g} is not a multiple of 1/16"


def cudnn_head_dim_limit(c: SdpaCall) -> int:
    """check_cudnn_tensor_shapes: 128, 256 where cuDNN D256 is supported, 192 for q/k 192 with v 128."""
    if c.cudnn_d256:
        return 256
    if c.sm90_or_sm10x and (c.stack.cudnn or 0) >= 91100 and (c.d_qk, c.d_v) == (192, 128):
        return 192
    return 128


def _cudnn_shapes(c: SdpaCall) -> str | None:
    if c.batch > 65535 or c.heads > 65535:
        return f"batch {c.batch} / heads {c.heads} above 65535"
    limit = cudnn_head_dim_limit(c)
    if c.d_qk > limit or c.d_v > limit:
        return f"head_dim {max(c.d_qk, c.d_v)} > {limit} on {c.cap} with cuDNN {c.stack.cudnn_text()}"
    if c.d_qk % 8 or c.d_v % 8:
        return f"head_dim {c.d_qk}/{c.d_v} not a multiple of 8"
    return None


def _cudnn_bprop(c: SdpaCall) -> str | None:
    if not (c.training and c.cudnn_d256):
        return None
    dims = (c.d_qk, c.d_v)
    if max(dims) <= 128 or dims in ((192, 128), (256, 256)):
        return None
    return f"backward with head_dims {c.d_qk}/{c.d_v} on {c.cap} (only <= 128, 192/128 or 256/256)"


Gate = tuple[str, Callable[[SdpaCall], str | None], str]
# (name, gate, source and the versions it holds for); order: as can_use_*_attention runs them
GATES: dict[str, tuple[Gate, ...]] = {
    "flash": (
        ("mask", _flash_mask, "sdp_utils_cpp.h check_for_attn_mask"),
        ("head_dim", _flash_head_dim, "cuda/sdp_utils.cpp check_head_dim_size_flash (CUDA; ROCm allows 512)"),
        ("hardware", _flash_hardware, "cuda/sdp_utils.cpp check_flash_attention_hardware_support"),
        ("training", _flash_gt192, "cuda/sdp_utils.cpp "
         "check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120"),
        ("dtype", _flash_dtype, "cuda/sdp_utils.cpp check_dtypes_flash_attention (fp8 with FA3 only)"),
    ),
    "efficient": (
        ("hardware", _efficient_hardware, "cuda/sdp_utils.cpp check_mem_efficient_hardware_support"),
        ("alignment", _efficient_alignment, "cuda/sdp_utils.cpp check_head_dim_size_mem_efficient, "
         "minimum_gemm_alignment"),
        ("gqa", _efficient_gqa, "sdp_utils_cpp.h check_batch_size_and_num_heads_dense<supports_gqa=false> "
         "for mem-efficient until torch 2.14 (pytorch#191085 added GQA; the 2.13 header predates it)"),
        ("dtype", _efficient_dtype, "cuda/sdp_utils.cpp can_use_mem_efficient_attention: "
         "less_than_sm80_mem_efficient_dtypes"),
    ),
    "cudnn": (
        ("version", _cudnn_version, "cuda/sdp_utils.cpp can_use_cudnn_attention: cuDNN >= 9.0, no dropout "
         "on 9.11-9.13"),
        ("dtype", _cudnn_dtype, "cuda/sdp_utils.cpp check_dtypes_low_precision"),
        ("hardware", _cudnn_hardware, "cuda/sdp_utils.cpp check_cudnn_hardware_support"),
        ("dropout", _cudnn_dropout, "cuda/sdp_utils.cpp check_cudnn_dropout"),
        ("head_dim", _cudnn_shapes, "cuda/sdp_utils.cpp check_cudnn_tensor_shapes (256: sm90/sm10x, cuDNN "
         "> 9.22, cudnn-frontend >= 1.24; 192/128 from 9.11)"),
        ("backward", _cudnn_bprop, "cuda/sdp_utils.cpp check_cudnn_d256_bprop_head_dim"),
    ),
}  # fmt: skip
PRIORITY = ("flash", "efficient", "math", "cudnn")  # ATen/Context.h sdp_priority_order
PRIORITY_CUDNN_FIRST = ("cudnn", "flash", "efficient", "math")  # cuda/sdp_utils.cpp priority_order


def cudnn_preferred(c: SdpaCall) -> str | None:
    """check_prefer_cudnn_attention: None when cuDNN goes first, else why not (the order stays
    flash, efficient, math, cudnn: cuDNN is then never reached, math always passes)."""
    major, minor = c.capability
    cudnn = c.stack.cudnn or 0
    if cudnn <= 91500:
        return f"cuDNN first only above 9.15.0 (cuDNN {c.stack.cudnn_text()})"
    if major not in (9, 10):
        return f"cuDNN first only on major 9 or 10 (capability {c.cap})"
    cuda = c.stack.cuda
    if cuda is not None and cuda < (13, 0) and minor not in (0, 3):
        return f"cuDNN first on CUDA {cuda[0]}.{cuda[1]} builds only on minor 0 or 3 (capability {c.cap})"
    return None


def refusal(c: SdpaCall, backend: str) -> str | None:
    """The first gate of `backend` that refuses the call, with its source, and any later gate that would
    refuse it too (so that lifting the first is seen not to be enough); None when all pass."""
    failing = [(why, source) for _, gate, source in GATES.get(backend, ()) if (why := gate(c)) is not None]
    if not failing:
        return None
    (why, source), later = failing[0], failing[1:]
    return f"{why} ({source})" + "".join(f"; also {w} ({src.split(' (')[0]})" for w, src in later)


def choose(c: SdpaCall) -> tuple[str, dict[str, str]]:
    """(backend, refusal reason per backend tried before it) as select_sdp_backend decides."""
    not_first = cudnn_preferred(c)
    order = PRIORITY if not_first else PRIORITY_CUDNN_FIRST
    refused: dict[str, str] = {}
    for backend in order:
        if backend == "math":
            chosen = "math"
            break
        if (why := refusal(c, backend)) is None:
            chosen = backend
            break
        refused[backend] = why
    if not_first and "cudnn" not in refused:
        also = refusal(c, "cudnn")
        refused["cudnn"] = f"not preferred: {not_first} (check_prefer_cudnn_attention)" + (
            f"; would also refuse: {also}" if also else ""
        )
    return chosen, refused
