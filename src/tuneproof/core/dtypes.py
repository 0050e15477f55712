"""The one dtype table: each floating dtype tuneproof reads or writes, under every name it goes by.

Short names are what flags and specs take (`bf16`); `torch` is the attribute of the torch module
(`torch.bfloat16`), `config` how a transformers config spells it (`torch_dtype: "bfloat16"`), and
`safetensors` the header's code (`BF16`). Lookups by any name go through this table; an unknown name
is an error, never the nearest dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(kw_only=True, frozen=True, slots=True)
class DType:
    short: str  # flags and specs: "bf16"
    torch: str  # torch attribute: "bfloat16"
    config: str  # transformers config `torch_dtype`: "bfloat16"
    safetensors: str  # safetensors header: "BF16"
    bytes: int  # bytes per element (a packed sub-byte type: its whole bytes, 1)
    bits: int | None = None  # bits per element where they are not 8 x bytes (sub-byte floats)

    @property
    def bit_size(self) -> int:
        """Bits per element (safetensors/src/tensor.rs `Dtype::bitsize`)."""
        return self.bits if self.bits is not None else 8 * self.bytes


# ordering rule: the training dtypes first (bf16, fp16), then the reference precisions
DTYPES: tuple[DType, ...] = (
    DType(short="bf16", torch="bfloat16", config="bfloat16", safetensors="BF16", bytes=2),
    DType(short="fp16", torch="float16", config="float16", safetensors="F16", bytes=2),
    DType(short="fp32", torch="float32", config="float32", safetensors="F32", bytes=4),
    DType(short="fp64", torch="float64", config="float64", safetensors="F64", bytes=8),
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
    DType(short="fp8_e4m3", torch="float8_e4m3fn", config="float8_e4m3fn", safetensors="F8_E4M3", bytes=1),
    DType(short="fp8_e5m2", torch="float8_e5m2", config="float8_e5m2", safetensors="F8_E5M2", bytes=1),
    DType(short="int8", torch="int8", config="int8", safetensors="I8", bytes=1),
    DType(short="uint8", torch="uint8", config="uint8", safetensors="U8", bytes=1),
    DType(short="int16", torch="int16", config="int16", safetensors="I16", bytes=2),
    DType(short="int32", torch="int32", config="int32", safetensors="I32", bytes=4),
    DType(short="int64", torch="int64", config="int64", safetensors="I64", bytes=8),
    DType(short="bool", torch="bool", config="bool", safetensors="BOOL", bytes=1),
)
TORCH_BY_SAFETENSORS = {d.safetensors: d.torch for d in STORED}  # "BF16" -> "bfloat16"
# The rest of what a safetensors header can name (safetensors/src/tensor.rs `Dtype`): read from headers
# and copied byte for byte, never read as numbers here; the sub-byte floats packed.
PACKED: tuple[DType, ...] = (
    DType(short="fp8_e8m0", torch="float8_e8m0fnu", config="float8_e8m0fnu", safetensors="F8_E8M0", bytes=1),
    DType(short="e8m0", torch="float8_e8m0fnu", config="float8_e8m0fnu", safetensors="E8M0", bytes=1),
    DType(short="uint16", torch="uint16", config="uint16", safetensors="U16", bytes=2),
    DType(short="uint32", torch="uint32", config="uint32", safetensors="U32", bytes=4),
    DType(short="uint64", torch="uint64", config="uint64", safetensors="U64", bytes=8),
    DType(
        short="fp4", torch="float4_e2m1fn_x2", config="float4_e2m1fn_x2", safetensors="F4", bytes=1, bits=4
    ),
    DType(short="fp6_e2m3", torch="", config="", safetensors="F6_E2M3", bytes=1, bits=6),
    DType(short="fp6_e3m2", torch="", config="", safetensors="F6_E3M2", bytes=1, bits=6),
)
SAFETENSORS_BITS = {d.safetensors: d.bit_size for d in (*STORED, *PACKED)}  # "BF16" -> 16, "F4" -> 4

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
