"""Measured dense GEMM throughput: an MFU denominator for devices the hardware table does not know
(the CPU included). Always labelled "measured peak", never mixed up with a datasheet value.

Convention: square matmuls n x n x n, 2*n^3 FLOPs each; the best median over the sizes tried. Each
size is timed by `torch.utils.benchmark.Timer.adaptive_autorange`, which synchronises the device and
repeats until the interquartile range is within 10 % of the median (or `max_seconds` pass).

With a `gpu` (a table name, or "auto" for this device) the result also carries that card's datasheet
peak from `tuneproof.hardware.gpus` and the measured share of it; the two are never mixed up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneproof.core.dtypes import BY_SHORT, MODEL_DTYPES, normalise_dtype
from tuneproof.core.verdict import Unjudged
from tuneproof.hardware.gpus import Peak

# what a GEMM can be timed in: the model dtypes, and tf32 (fp32 tensors, TF32 matmuls)
TORCH_DTYPES = {**{s: BY_SHORT[s].torch for s in MODEL_DTYPES}, "tf32": "float32"}
SIZES = {"cpu": (256, 512, 1024), "cuda": (2048, 4096, 8192)}
IQR_THRESHOLD = 0.1  # adaptive_autorange's stopping rule: IQR / median below this


@dataclass(kw_only=True, frozen=True, slots=True)
class MeasuredPeak(Unjudged):
    tflops: float
    device: str
    dtype: str
    size: int
    median_s: float
    iqr_s: float
    runs: int
    label: str = "measured peak"
    table: Peak | None = None  # the named card's datasheet peak, beside the measurement

    @property
    def share_of_table(self) -> float | None:
        """Measured / datasheet, where both exist."""
        return self.tflops / self.table.tflops if self.table and self.table.tflops else None

    @property
    def source(self) -> str:
        return f"measured peak ({self.size}^3 GEMM on {self.device}, median of {self.runs} runs)"

    def as_peak(self) -> Peak:
        return Peak(tflops=self.tflops, source=self.source, dtype=self.dtype)

    def to_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "tflops": self.tflops,
            "device": self.device,
            "dtype": self.dtype,
            "gemm": f"{self.size}x{self.size}x{self.size}",
            "median_s": self.median_s,
            "iqr_s": self.iqr_s,
            "runs": self.runs,
            "table_peak": None
            if self.table is None
            else {"tflops": self.table.tflops, "source": self.table.source, "reason": self.table.reason},
            "share_of_table": self.share_of_table,
        }

    def render(self, console: Any) -> None:
        from tuneproof.measure.render import render_peak

        render_peak(self, console)


def measure_peak(
    device: str = "cpu", dtype: str = "bf16", max_seconds: float = 2.0, sizes: tuple[int, ...] | None = None
) -> MeasuredPeak:
    """Best median dense GEMM TFLOP/s over `sizes` (None: `SIZES[device]`), each timed for at most
    `max_seconds` (adaptive_autorange until the IQR is under IQR_THRESHOLD of the median)."""
    import torch
    from torch.utils.benchmark import Timer

    d = normalise_dtype(dtype)
    tdtype = getattr(torch, TORCH_DTYPES[d])
    best: MeasuredPeak | None = None
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = d == "tf32"
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        for n in sizes or SIZES[device]:
            a = torch.randn(n, n, device=device, dtype=tdtype, generator=gen)
            b = torch.randn(n, n, device=device, dtype=tdtype, generator=gen)
            # Timer runs single-threaded unless told: measure with the threads the workload gets
            timer = Timer(
                "torch.mm(a, b)",
                globals={"torch": torch, "a": a, "b": b},
                num_threads=torch.get_num_threads(),
            )
            m = timer.adaptive_autorange(threshold=IQR_THRESHOLD, max_run_time=max_seconds)
            tflops = 2.0 * n**3 / m.median / 1e12
            if best is None or tflops > best.tflops:
                best = MeasuredPeak(
                    tflops=tflops,
                    device=device,
                    dtype=d,
                    size=n,
                    median_s=m.median,
                    iqr_s=m.iqr,
                    runs=len(m.times),
                )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    assert best is not None
    return best
