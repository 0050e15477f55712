"""Measured dense GEMM throughput: an MFU denominator for devices the hardware table does not know
(the CPU included). Always labelled "measured peak", never mixed up with a datasheet value.

Convention: square matmuls n x n x n, 2*n^3 FLOPs each; the best median over the sizes tried.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from tuneproof.errors import TuneproofError
from tuneproof.hardware import normalise_dtype
from tuneproof.measure.timing import Timing, time_fn

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}
SIZES = {"cpu": (256, 512, 1024), "cuda": (2048, 4096, 8192)}


@dataclass(frozen=True, slots=True)
class MeasuredPeak:
    tflops: float
    device: str
    dtype: str
    size: int
    timing: Timing
    label: str = "measured peak"

    def to_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "tflops": self.tflops,
            "device": self.device,
            "dtype": self.dtype,
            "gemm": f"{self.size}x{self.size}x{self.size}",
            "timing": self.timing.to_dict(),
        }


def measure_peak(
    device: str = "cpu", dtype: str = "bf16", repeats: int = 5, sizes: tuple[int, ...] | None = None
) -> MeasuredPeak:
    import torch

    d = normalise_dtype(dtype)
    if d not in TORCH_DTYPES:
        raise TuneproofError(
            f"--dtype {dtype!r} cannot be measured", "use one of: " + ", ".join(TORCH_DTYPES)
        )
    if device not in SIZES:
        raise TuneproofError(f"--device {device!r} is not known", "use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise TuneproofError("--device cuda but torch sees no CUDA device", "use --device cpu")
    tdtype = getattr(torch, TORCH_DTYPES[d])
    best: MeasuredPeak | None = None
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = d == "tf32"
    try:
        for n in sizes or SIZES[device]:
            a = torch.randn(n, n, device=device, dtype=tdtype)
            b = torch.randn(n, n, device=device, dtype=tdtype)
            timing = time_fn(partial(torch.mm, a, b), repeats=repeats, warmup=2, device=device)
            tflops = 2.0 * n**3 / timing.median_s / 1e12
            if best is None or tflops > best.tflops:
                best = MeasuredPeak(tflops, device, d, n, timing)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    assert best is not None
    return best
