"""Step-time scaling fit: t(w) = A*w + B*w^2, no constant term (../shared/CASE.md section 2).

A*w is the work linear in width (GEMMs, elementwise), B*w^2 the quadratic work (attention). The
quadratic share at width w is B*w^2 / (A*w + B*w^2). A and B are fitted by non-negative least
squares over every row (repeats included). Share uncertainty: percentile bootstrap (95 %) that
resamples repeats within each width, or residuals when a width has a single row.

A second fit adds a constant C (ordinary least squares). A C that is significantly non-zero means
per-step overhead that does not scale with width (launch- or host-bound); a C indistinguishable from
zero refutes that hypothesis, as in the CASE.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuneproof.errors import TuneproofError

MIN_WIDTHS = 3
MIN_SPAN = 4.0
BOOTSTRAP = 2000
# two-sided 97.5 % Student-t quantiles by degrees of freedom (1..30); 1.96 beyond
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def read_points(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a `width,seconds` CSV (one row per repeat). Errors name the line to fix."""
    p = Path(path)
    if not p.is_file():
        raise TuneproofError(f"points file not found: {p}", "pass a CSV with a 'width,seconds' header")
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in ("width", "seconds") if c not in header]
        if missing:
            raise TuneproofError(
                f"{p}: missing column {', '.join(missing)} (header: {','.join(header) or 'none'})",
                "the first line must be 'width,seconds'",
            )
        widths, seconds = [], []
        for line, row in enumerate(reader, start=2):
            row = {k.strip(): v for k, v in row.items() if k is not None}
            try:
                w, t = float(row["width"]), float(row["seconds"])
            except (TypeError, ValueError):
                raise TuneproofError(
                    f"{p}:{line}: not numbers: {row.get('width')!r}, {row.get('seconds')!r}",
                    "each row is an integer width and a time in seconds",
                ) from None
            if w <= 0 or not math.isfinite(w):
                raise TuneproofError(f"{p}:{line}: width must be > 0, got {row['width']}", "fix that row")
            if t <= 0 or not math.isfinite(t):
                raise TuneproofError(
                    f"{p}:{line}: seconds must be > 0, got {row['seconds']}",
                    "a step time is positive; drop or re-measure that row",
                )
            widths.append(w)
            seconds.append(t)
    return np.asarray(widths), np.asarray(seconds)


def _nnls_ab(w: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Least squares of t on [w, w^2] with A, B >= 0 (exact for two unknowns: interior or a boundary)."""
    x = np.stack([w, w * w], axis=1)
    candidates = []
    sol, *_ = np.linalg.lstsq(x, t, rcond=None)
    if (sol >= 0).all():
        candidates.append((float(sol[0]), float(sol[1])))
    a_only = max(0.0, float(w @ t / (w @ w)))
    b_only = max(0.0, float((w * w) @ t / ((w * w) @ (w * w))))
    candidates += [(a_only, 0.0), (0.0, b_only)]
    return min(candidates, key=lambda ab: float(np.sum((t - ab[0] * w - ab[1] * w * w) ** 2)))


def _share(a: float, b: float, w: float) -> float:
    total = a * w + b * w * w
    return b * w * w / total if total > 0 else float("nan")


@dataclass(frozen=True, slots=True)
class ConstantTerm:
    """The fit t = C + A*w + B*w^2. `significant` is None when the rows leave no degree of freedom."""

    c: float
    stderr: float | None
    significant: bool | None
    reason: str


@dataclass(frozen=True, slots=True)
class ScalingFit:
    a: float
    b: float
    widths: list[float]
    residuals_s: list[float]
    quad_share: dict[float, float]
    quad_share_ci: dict[float, tuple[float, float]]
    constant: ConstantTerm
    num_rows: int
    num_bootstrap: int

    def to_dict(self) -> dict[str, object]:
        def key(w: float) -> str:
            return str(int(w)) if float(w).is_integer() else str(w)

        return {
            "A": self.a,
            "B": self.b,
            "model": "t = A*w + B*w^2 (NNLS, no constant)",
            "residuals_s": self.residuals_s,
            "quad_share": {key(w): s for w, s in self.quad_share.items()},
            "quad_share_ci": {key(w): list(ci) for w, ci in self.quad_share_ci.items()},
            "constant": {
                "C": self.constant.c,
                "stderr": self.constant.stderr,
                "significant": self.constant.significant,
                "reason": self.constant.reason,
            },
            "num_rows": self.num_rows,
            "num_bootstrap": self.num_bootstrap,
        }


def _constant_term(w: np.ndarray, t: np.ndarray) -> ConstantTerm:
    x = np.stack([np.ones_like(w), w, w * w], axis=1)
    sol, *_ = np.linalg.lstsq(x, t, rcond=None)
    c = float(sol[0])
    dof = len(t) - 3
    if dof <= 0:
        return ConstantTerm(c, None, None, f"{len(t)} rows fit 3 parameters exactly: add repeats to test C")
    sigma2 = float(np.sum((t - x @ sol) ** 2)) / dof
    cov = sigma2 * np.linalg.inv(x.T @ x)
    se = math.sqrt(max(float(cov[0, 0]), 0.0))
    crit = _T975[dof - 1] if dof <= len(_T975) else 1.96
    sig = bool(c != 0) if se == 0 else abs(c) > crit * se
    if sig:
        verdict = (
            f"C = {c:.3g} s is distinguishable from 0 (|C| > {crit:.2f} x SE {se:.2g}): per-step "
            "overhead that does not scale with width (launch- or host-bound)"
        )
    else:
        verdict = (
            f"C = {c:.3g} s is not distinguishable from 0 (SE {se:.2g}): "
            "the launch-/host-bound hypothesis is refuted"
        )
    return ConstantTerm(c, se, sig, verdict)


def fit_scaling(
    widths: np.ndarray, seconds: np.ndarray, at: list[float] | None = None, seed: int = 0
) -> ScalingFit:
    """Fit t = A*w + B*w^2 to rows of (width, seconds) and report quadratic shares with 95 % CIs."""
    w, t = np.asarray(widths, dtype=float), np.asarray(seconds, dtype=float)
    distinct = np.unique(w)
    if len(distinct) < MIN_WIDTHS:
        raise TuneproofError(
            f"{len(distinct)} distinct width(s): the fit needs at least {MIN_WIDTHS}",
            "time more widths, e.g. 2048, 8192, 16384",
        )
    span = distinct[-1] / distinct[0]
    if span < MIN_SPAN:
        raise TuneproofError(
            f"widths span {span:.2f}x: the fit needs at least {MIN_SPAN:g}x",
            f"add a width below {distinct[-1] / MIN_SPAN:g} or above {distinct[0] * MIN_SPAN:g}",
        )
    a, b = _nnls_ab(w, t)
    fitted = a * w + b * w * w
    residuals = t - fitted
    report_at = sorted({*distinct.tolist(), *(at or [])})
    shares = {x: _share(a, b, x) for x in report_at}

    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(w == x) for x in distinct]
    boot = np.empty((BOOTSTRAP, len(report_at)))
    for i in range(BOOTSTRAP):
        if all(len(g) > 1 for g in groups):  # resample repeats within each width
            idx = np.concatenate([rng.choice(g, size=len(g)) for g in groups])
            ba, bb = _nnls_ab(w[idx], t[idx])
        else:  # residual bootstrap
            ba, bb = _nnls_ab(w, fitted + rng.choice(residuals, size=len(residuals)))
        boot[i] = [_share(ba, bb, x) for x in report_at]
    lo, hi = np.nanpercentile(boot, [2.5, 97.5], axis=0)
    ci = {x: (float(lo[j]), float(hi[j])) for j, x in enumerate(report_at)}
    return ScalingFit(
        a, b, distinct.tolist(), residuals.tolist(), shares, ci, _constant_term(w, t), len(t), BOOTSTRAP
    )
