"""Measure where step time goes: timing harness, measured peak, scaling fit, kernel table, cross-check,
probe.

Names load on first use (numpy, scipy and torch are not imported by `import tuneproof.measure`)."""

from tuneproof.core.lazy import lazy

_EXPORTS = {
    "Agreement": "tuneproof.measure.crosscheck",
    "ConstantTerm": "tuneproof.measure.constant",
    "CrossCheck": "tuneproof.measure.crosscheck",
    "Interleaved": "tuneproof.measure.timing",
    "KernelTable": "tuneproof.measure.kernels",
    "ProbeResult": "tuneproof.measure.probe_result",
    "ProbeSetup": "tuneproof.measure.probe",
    "ScalingFit": "tuneproof.measure.fit",
    "Timing": "tuneproof.measure.timing",
    "cross_check": "tuneproof.measure.crosscheck",
    "fit_scaling": "tuneproof.measure.fit",
    "judge_agreement": "tuneproof.measure.crosscheck",
    "judge_constant": "tuneproof.measure.constant",
    "kernel_table": "tuneproof.measure.kernels",
    "load_trace": "tuneproof.trace.read",
    "read_points": "tuneproof.measure.points",
    "time_fn": "tuneproof.measure.timing",
    "time_interleaved": "tuneproof.measure.timing",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)
