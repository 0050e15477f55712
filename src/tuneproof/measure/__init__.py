"""Measure where step time goes: the scaling fit (more measurement tools follow)."""

from tuneproof.measure.fit import ConstantTerm, ScalingFit, fit_scaling, read_points

__all__ = ["ConstantTerm", "ScalingFit", "fit_scaling", "read_points"]
