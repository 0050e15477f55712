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
BY_SHORT = {d.short: d for d in DTYPES}
BY_SAFETENSORS = {d.safetensors: d for d in DTYPES}
BY_CONFIG = {d.config: d for d in DTYPES}


def torch_dtype(short: str) -> Any:
    """`torch.bfloat16` for "bf16" (torch is imported here, on first use)."""
    import torch

    return getattr(torch, BY_SHORT[short].torch)


def short_name(dtype: Any) -> str | None:
    """ "bf16" for `torch.bfloat16` (or its string form "torch.bfloat16"); None for a dtype not here."""
    name = str(dtype).removeprefix("torch.")
    return next((d.short for d in DTYPES if d.torch == name), None)
