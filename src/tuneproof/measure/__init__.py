"""Measure where step time goes: timing harness, measured peak, scaling fit."""

from tuneproof.measure.fit import ConstantTerm, ScalingFit, fit_scaling, read_points
from tuneproof.measure.timing import Timing, time_fn

__all__ = ["ConstantTerm", "ScalingFit", "Timing", "fit_scaling", "read_points", "time_fn"]
