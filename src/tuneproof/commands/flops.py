"""`tuneproof flops` as the library runs it: a `FlopsSpec` (the step, its measured time, the peak),
`prepare(spec)` (every check, once, before any counting) and `run(plan)`: a `FlopReport`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuneproof.arch import ResolvedModel, resolve
from tuneproof.arch.shape import ModelShape
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.flops.report import FlopReport, check_step_time, flop_report
from tuneproof.hardware.gpus import Peak
from tuneproof.runs.step import Step


@dataclass(kw_only=True, frozen=True, slots=True)
class FlopsSpec:
    """One step to count (`run`) on `model` and, for MFU, its measured `step_time_s` and a peak:
    `peak_tflops` given, or the table's for `gpu` in `dtype`. Checked on construction, before a model
    is read (reading one imports transformers: seconds). `model`: a config ("tiny", a config.json or
    its folder, a hub id in the local cache) read by `prepare`, or a model already resolved
    (`tuneproof.resolve`; its `notes` say which fields came from transformers' defaults)."""

    model: str | Path | ResolvedModel = "tiny"
    run: Step
    step_time_s: float | None = None
    gpu: str | None = None
    dtype: str = "bf16"
    peak_tflops: float | None = None
    peak: Peak | None = field(init=False, default=None)  # resolved from gpu / peak_tflops / dtype

    def __post_init__(self) -> None:
        from tuneproof.core.dtypes import check_dtype
        from tuneproof.hardware.gpus import resolve_peak

        check_dtype(self.dtype)
        if self.step_time_s is not None:
            check_step_time(self.step_time_s)
        if self.gpu is not None or self.peak_tflops is not None:
            object.__setattr__(self, "peak", resolve_peak(self.gpu, self.dtype, self.peak_tflops))
        if self.step_time_s is not None and self.peak is None:
            raise TuneproofError(
                "{step_time} needs a peak for MFU",
                "add {gpu} or {peak_tflops}",
                fields=("step_time", "gpu", "peak_tflops"),
            )


@dataclass(kw_only=True, frozen=True, slots=True)
class FlopsPlan:
    """What `run` counts, with the notes found on the way in and the model's own warnings (the fields
    its config left to transformers' defaults)."""

    shape: ModelShape
    spec: FlopsSpec
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def prepare(spec: FlopsSpec) -> FlopsPlan:
    """The plan for `spec` on its model. A width over the model's positions is counted as asked
    (context extension), with a note."""
    model = resolve(spec.model)
    notes = model.positions_notes(spec.run.seq_len)
    return FlopsPlan(shape=model.shape, spec=spec, notes=notes, warnings=model.notes)


def run(plan: FlopsPlan, progress: Progress | None = None) -> FlopReport:
    """Both ledgers, the named excess and MFU (quick: no progress to report)."""
    spec = plan.spec
    report = flop_report(plan.shape, spec.run, step_time_s=spec.step_time_s, peak=spec.peak)
    report.notes.extend(plan.notes)
    report.warnings[:0] = plan.warnings
    return report
