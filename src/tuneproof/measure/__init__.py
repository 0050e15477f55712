"""Measure where step time goes: timing harness, measured peak, scaling fit, kernel table, probe."""

from tuneproof.measure.fit import ConstantTerm, ScalingFit, fit_scaling, read_points
from tuneproof.measure.kernels import KernelTable, kernel_table, load_trace
from tuneproof.measure.probe import ProbeResult, ProbeSpec, run_probe
from tuneproof.measure.timing import Timing, time_fn

__all__ = [
    "ConstantTerm",
    "KernelTable",
    "ProbeResult",
    "ProbeSpec",
    "ScalingFit",
    "Timing",
    "fit_scaling",
    "kernel_table",
    "load_trace",
    "read_points",
    "run_probe",
    "time_fn",
]
