"""Measure where step time goes: timing harness, measured peak, scaling fit, kernel table, cross-check,
probe."""

from tuneproof.measure.crosscheck import CrossCheck, Verdict, cross_check, judge
from tuneproof.measure.fit import ConstantTerm, ScalingFit, fit_scaling, judge_constant, read_points
from tuneproof.measure.kernels import KernelTable, kernel_table, load_trace
from tuneproof.measure.probe import ProbeResult, ProbeSpec, run_probe
from tuneproof.measure.timing import Interleaved, Timing, time_fn, time_interleaved

__all__ = [
    "ConstantTerm",
    "CrossCheck",
    "Interleaved",
    "KernelTable",
    "ProbeResult",
    "ProbeSpec",
    "ScalingFit",
    "Timing",
    "Verdict",
    "cross_check",
    "fit_scaling",
    "judge",
    "judge_constant",
    "kernel_table",
    "load_trace",
    "read_points",
    "run_probe",
    "time_fn",
    "time_interleaved",
]
