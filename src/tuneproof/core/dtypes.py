"""The one dtype table: each floating dtype tuneproof reads or writes, under every name it goes by.

Short names are what flags and specs take (`bf16`); `torch` is the attribute of the torch module
(`torch.bfloat16`), `config` how a transformers config spells it (`torch_dtype: "bfloat16"`), and
`safetensors` the header's code (`BF16`). Lookups by any name go through this table; an unknown name
is an error, never the nearest dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class DType:
    short: str  # flags and specs: "bf16"
    torch: str  # torch attribute: "bfloat16"
    config: str  # transformers config `torch_dtype`: "bfloat16"
    safetensors: str  # safetensors header: "BF16"
    bytes: int


# ordering rule: the training dtypes first (bf16, fp16), then the reference precisions
DTYPES: tuple[DType, ...] = (
    DType("bf16", "bfloat16", "bfloat16", "BF16", 2),
    DType("fp16", "float16", "float16", "F16", 2),
    DType("fp32", "float32", "float32", "F32", 4),
    DType("fp64", "float64", "float64", "F64", 8),
)
MODEL_DTYPES = ("bf16", "fp16", "fp32")  # what a model is built, trained, merged or attended in
LOW_PRECISION = ("bf16", "fp16")  # the training dtypes, judged against fp32 truth
BY_SHORT = {d.short: d for d in DTYPES}
BY_SAFETENSORS = {d.safetensors: d for d in DTYPES}
BY_CONFIG = {d.config: d for d in DTYPES}
# Every dtype a safetensors header can name that torch reads as numbers: the floats above, then 8-bit
# floats, integers and bool (read and copied, never merged or attended in).
STORED: tuple[DType, ...] = (
    *DTYPES,
    DType("fp8_e4m3", "float8_e4m3fn", "float8_e4m3fn", "F8_E4M3", 1),
    DType("fp8_e5m2", "float8_e5m2", "float8_e5m2", "F8_E5M2", 1),
    DType("int8", "int8", "int8", "I8", 1),
    DType("uint8", "uint8", "uint8", "U8", 1),
    DType("int16", "int16", "int16", "I16", 2),
    DType("int32", "int32", "int32", "I32", 4),
    DType("int64", "int64", "int64", "I64", 8),
    DType("bool", "bool", "bool", "BOOL", 1),
)
TORCH_BY_SAFETENSORS = {d.safetensors: d.torch for d in STORED}  # "BF16" -> "bfloat16"

# The precisions a throughput peak is quoted for (the GPU table's columns, plus fp32 for a measured
# peak): tf32 is a matmul mode over fp32 tensors, fp8/fp4 the tensor cores' low-precision formats.
PEAK_DTYPES = ("bf16", "fp16", "fp8", "fp4", "tf32", "fp32")
PEAK_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8", "fp8_e4m3": "fp8"}


def torch_dtype(short: str) -> Any:
    """`torch.bfloat16` for "bf16" (torch is imported here, on first use)."""
    import torch

    return getattr(torch, BY_SHORT[short].torch)


def short_name(dtype: Any) -> str | None:
    """ "bf16" for `torch.bfloat16` (or its string form "torch.bfloat16"); None for a dtype not here."""
    name = str(dtype).removeprefix("torch.")
    return next((d.short for d in DTYPES if d.torch == name), None)


def normalise_dtype(dtype: str) -> str:
    """A peak's precision as the table names it: "torch.bfloat16", "BFloat16" -> "bf16"."""
    d = dtype.strip().lower().removeprefix("torch.")
    return PEAK_ALIASES.get(d, d)


def check_dtype(dtype: object) -> str:
    """The normalised precision of a peak, or an error naming the known ones."""
    from tuneproof.core.errors import TuneproofError

    d = normalise_dtype(dtype) if isinstance(dtype, str) else ""
    if d not in PEAK_DTYPES:
        raise TuneproofError(
            f"{{dtype}} {dtype!r} is not known", "use one of: " + ", ".join(PEAK_DTYPES), fields=("dtype",)
        )
    return d
