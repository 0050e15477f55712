"""`tuneproof peak`: the device's own dense GEMM peak (`measure.peak.measure_peak`), beside a datasheet's
when a card is named. A `PeakSpec`, `prepare` (the device exists, the card is known) and `run`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tuneproof.core import validate
from tuneproof.core.dtypes import normalise_dtype
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.hardware.gpus import Peak, resolve_peak
from tuneproof.measure.peak import SIZES, TORCH_DTYPES, MeasuredPeak, measure_peak


@dataclass(kw_only=True, frozen=True, slots=True)
class PeakSpec:
    """`tuneproof peak`: the device, the dtype (any of its names), the most seconds per GEMM size, the
    sizes (None: `SIZES[device]`), and the card whose datasheet peak to set beside it (None: none)."""

    device: str = "cpu"
    dtype: str = "bf16"
    max_seconds: float = 2.0
    sizes: tuple[int, ...] | None = None
    gpu: str | None = None

    def __post_init__(self) -> None:
        validate.choice("dtype", normalise_dtype(self.dtype), TORCH_DTYPES)
        validate.choice("device", self.device, SIZES)
        if normalise_dtype(self.dtype) == "tf32" and self.device != "cuda":
            raise TuneproofError(
                f"{{dtype}} tf32 on {self.device}: TF32 is an NVIDIA tensor-core mode; a CPU GEMM in fp32 "
                "is plain fp32, so the peak would be fp32's under another name",
                "use fp32 on the CPU, or tf32 on a CUDA device",
                fields=("dtype", "device"),
            )
        validate.real("max_seconds", self.max_seconds, low=0.0, low_open=True, high=3600.0)


def prepare(spec: PeakSpec) -> PeakSpec:
    """The device must exist: cuda needs torch to see a CUDA device. A `gpu` must be in the table, and
    its datasheet is set only beside a measurement on cuda."""
    import torch

    _table_peak(spec)
    if spec.gpu is not None and spec.device != "cuda":
        raise TuneproofError(
            f"{{gpu}} {spec.gpu!r} with {{device}} {spec.device}: a GPU's datasheet peak is no yardstick "
            "for a CPU measurement",
            "measure on cuda, or leave gpu out",
            fields=("gpu", "device"),
        )
    if spec.device == "cuda" and not torch.cuda.is_available():
        raise TuneproofError("{device} cuda but torch sees no CUDA device", "use cpu", fields=("device",))
    return spec


def _table_peak(spec: PeakSpec) -> Peak | None:
    return None if spec.gpu is None else resolve_peak(spec.gpu, normalise_dtype(spec.dtype))


def run(plan: PeakSpec, progress: Progress | None = None) -> MeasuredPeak:
    """Best median dense GEMM TFLOP/s over the plan's sizes (`measure_peak`), with the card's datasheet
    peak beside it when the spec names one."""
    found = measure_peak(plan.device, plan.dtype, max_seconds=plan.max_seconds, sizes=plan.sizes)
    return replace(found, table=_table_peak(plan))
