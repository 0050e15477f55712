"""`tuneproof fit`: t(w) = A*w + B*w^2 (+ C) fitted to a points CSV (`measure.fit.fit_scaling`), with the
quadratic share at each width and its interval. A `FitSpec`, `prepare` (the points read) and `run`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuneproof.core import validate
from tuneproof.core.progress import Progress
from tuneproof.measure.fit import ScalingFit, fit_scaling
from tuneproof.measure.points import MIN_SPAN, MIN_WIDTHS, Samples, read_points  # noqa: F401 (re-exported)


@dataclass(kw_only=True, frozen=True, slots=True)
class FitSpec:
    """The points CSV to fit, and extra widths (tokens) to report the quadratic share at (None: only
    the measured ones; an empty tuple is refused)."""

    points: Path
    at: tuple[int, ...] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.at is not None:
            validate.integers("at", self.at)


@dataclass(kw_only=True, frozen=True, slots=True)
class FitPlan:
    widths: np.ndarray
    seconds: np.ndarray
    at: list[float]
    seed: int
    source: str = "the points"


def prepare(spec: FitSpec) -> FitPlan:
    """Read and check the points (every row's units, before any fitting)."""
    widths, seconds = read_points(spec.points)
    return FitPlan(
        widths=widths,
        seconds=seconds,
        at=[float(x) for x in spec.at or ()],
        seed=spec.seed,
        source=str(spec.points),
    )


def run(plan: FitPlan, progress: Progress | None = None) -> ScalingFit:
    """The fit, refused (one line, exit 2) when the times do not grow with width: A = B = 0 would
    print quadratic shares of 100 % from a constant alone."""
    from tuneproof.measure.fit import require_growth

    fit = fit_scaling(plan.widths, plan.seconds, at=plan.at, seed=plan.seed)
    require_growth(fit, plan.widths, plan.source)
    return fit
