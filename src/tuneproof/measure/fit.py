"""Step-time scaling fit: t(w) = A*w + B*w^2 (docs/reference-run.md section 2), with honest intervals.

A*w is the work linear in width (GEMMs, elementwise), B*w^2 the quadratic work (attention). The
quadratic share at width w is B*w^2 / t(w).

How the numbers are made:
- Rows are timed repeats. Per width, outlying repeats (`robust.outliers`) are set aside and named;
  the fit runs on the per-width medians, so one wild repeat cannot bend it. Medians are weighted by
  1/median (relative residuals: step-time noise scales with the step).
- Point estimate: non-negative least squares (scipy.optimize.nnls): A, B >= 0.
- Intervals: percentile bootstrap (scipy.stats.bootstrap) resampling the repeats within each width.
  Inside the bootstrap the coefficients are unconstrained and each share is clipped to [0, 1] only at
  the end, so a B at the NNLS boundary gets an interval [0, upper] that says how much quadratic work
  the noise still allows, never a false [0, 0]. A width with one row gives no interval (said so).
- The constant test fits t = C + A*w + B*w^2 and judges C's 95 % interval against a margin of 10 % of
  the smallest width's step: "present" (C above the margin: per-step overhead, launch- or
  host-bound), "absent" (the interval lies inside +-margin: any overhead is too small to matter,
  the launch-bound hypothesis is refuted), or "undetermined" (the interval is too wide to say; it
  says about how many repeats would decide). Only an absent constant is dropped from the model:
  otherwise the shares come from t = C + A*w + B*w^2, so an unproven "no overhead" cannot bias them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof import validate
from tuneproof.errors import TuneproofError
from tuneproof.measure import robust
from tuneproof.measure.constant import ConstantTerm, judge_constant
from tuneproof.measure.points import MAX_SECONDS, MAX_WIDTH, MIN_SECONDS, read_points
from tuneproof.verdict import NoWarnings, Verdict

MIN_WIDTHS = 3
MIN_SPAN = 4.0
BOOTSTRAP = 2000
CONFIDENCE = 0.95
CONSTANT_MARGIN = 0.10  # of the smallest width's step time: a smaller constant cannot make a run launch-bound


# ---- the least-squares pieces, vectorised over bootstrap resamples (leading axes) ----------------


def _design(w: np.ndarray, constant: bool) -> np.ndarray:
    cols = [np.ones_like(w)] if constant else []
    return np.stack([*cols, w, w * w], axis=-1)


def _unscale(coef: np.ndarray, ref: float, constant: bool) -> np.ndarray:
    """Coefficients fitted on w / ref back to coefficients on w."""
    factors = np.array(([1.0] if constant else []) + [1.0 / ref, 1.0 / ref**2])
    return coef * factors


def solve(
    w: np.ndarray, medians: np.ndarray, constant: bool, scale_by: np.ndarray | None = None
) -> np.ndarray:
    """Unconstrained weighted least squares of medians (..., k) on [1,] w, w^2, weights 1/`scale_by`
    (default: the medians themselves, i.e. relative residuals). Returns coefficients (..., 2 or 3):
    [C,] A, B. Fits sharing `scale_by` are additive: fitting parts gives the parts of the fit of the
    sum. Widths are scaled by the largest one first, so that w^2 at long contexts does not ruin the
    normal equations' conditioning."""
    ref = float(w.max())
    x = _design(w / ref, constant)  # (k, p)
    scale = 1.0 / (medians if scale_by is None else scale_by)  # (..., k)
    xs = x * scale[..., None]  # (..., k, p)
    xtx = np.einsum("...kp,...kq->...pq", xs, xs)
    xty = np.einsum("...kp,...k->...p", xs, medians * scale)
    return _unscale(np.linalg.solve(xtx, xty[..., None])[..., 0], ref, constant)


def nonneg(w: np.ndarray, medians: np.ndarray, constant: bool) -> np.ndarray:
    """The same fit with every coefficient >= 0 (scipy.optimize.nnls): the point estimate."""
    from scipy.optimize import nnls

    ref = float(w.max())
    x = _design(w / ref, constant) / medians[:, None]
    coef, _ = nnls(x, np.ones_like(medians))
    return _unscale(coef, ref, constant)


def shares(coef: np.ndarray, at: np.ndarray, constant: bool) -> np.ndarray:
    """Quadratic share B*w^2 / t(w) at widths `at`, clipped to [0, 1] (coef (..., p) -> (..., len(at)))."""
    c = coef[..., 0:1] if constant else 0.0
    a, b = coef[..., -2:-1], coef[..., -1:]
    quad = b * at * at
    total = c + a * at + quad
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(total > 0, quad / total, np.where(quad > 0, 1.0, 0.0))
    return np.clip(s, 0.0, 1.0)


# ---- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScalingFit(NoWarnings):
    a: float
    b: float
    c: float  # 0 unless the constant is present and the model carries it
    constant_in_model: bool
    widths: list[float]
    medians: dict[float, float]
    rows: dict[float, int]  # kept rows per width
    outliers: dict[float, list[float]]  # rows set aside per width
    residuals_s: list[float]  # per width: median - fitted
    quad_share: dict[float, float]
    quad_share_ci: dict[float, tuple[float, float]] | None
    ci_reason: str | None  # why there is no interval
    constant: ConstantTerm
    num_rows: int
    num_bootstrap: int

    @property
    def model(self) -> str:
        return "t = C + A*w + B*w^2" if self.constant_in_model else "t = A*w + B*w^2"

    def fitted(self, w: float) -> float:
        return self.c + self.a * w + self.b * w * w

    @property
    def verdict(self) -> Verdict:
        """The constant test's verdict: the one thing the fit judges."""
        return self.constant.as_verdict()

    def render(self, console: Any) -> None:
        from tuneproof.measure.render import render_fit

        render_fit(self, console)

    def to_dict(self) -> dict[str, object]:
        def key(w: float) -> str:
            return str(int(w)) if float(w).is_integer() else str(w)

        return {
            "A": self.a,
            "B": self.b,
            "C": self.c,
            "model": self.model + " (NNLS on per-width medians, weights 1/median)",
            "medians_s": {key(w): m for w, m in self.medians.items()},
            "rows": {key(w): n for w, n in self.rows.items()},
            "outliers_excluded_s": {key(w): o for w, o in self.outliers.items() if o},
            "residuals_s": self.residuals_s,
            "quad_share": {key(w): s for w, s in self.quad_share.items()},
            "quad_share_ci": (
                {key(w): list(ci) for w, ci in self.quad_share_ci.items()} if self.quad_share_ci else None
            ),
            "ci_reason": self.ci_reason,
            "constant": self.constant.to_dict(),
            "num_rows": self.num_rows,
            "num_bootstrap": self.num_bootstrap,
        }


@dataclass(frozen=True, slots=True)
class Samples:
    """Kept repeats per width (outliers set aside), the unit every resampling works on."""

    widths: np.ndarray  # distinct widths, ascending
    kept: list[np.ndarray]
    outliers: list[np.ndarray]

    @classmethod
    def of(cls, widths: np.ndarray, seconds: np.ndarray) -> Samples:
        w, t = np.asarray(widths, dtype=float), np.asarray(seconds, dtype=float)
        if w.shape != t.shape or w.ndim != 1:
            raise TuneproofError(
                "widths and seconds must be two lists of the same length", "one width per time"
            )
        if not (np.isfinite(w).all() and np.isfinite(t).all()) or (w <= 0).any() or (t <= 0).any():
            raise TuneproofError(
                "widths and seconds must be finite and > 0", "drop or re-measure the bad rows"
            )
        if (w > MAX_WIDTH).any() or (t > MAX_SECONDS).any() or (t < MIN_SECONDS).any():
            raise TuneproofError(
                f"widths must be <= {MAX_WIDTH:,} and seconds in [{MIN_SECONDS:g}, {MAX_SECONDS:g}]",
                "check the units of the rows",
            )
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
        kept, out = [], []
        for x in distinct:
            rows = t[w == x]
            flags = robust.outliers(rows)
            kept.append(rows[~flags])
            out.append(rows[flags])
        return cls(distinct, kept, out)

    @property
    def medians(self) -> np.ndarray:
        return np.array([np.median(k) for k in self.kept])

    @property
    def resamplable(self) -> bool:
        """Every width has the repeats a 95 % interval of its median needs."""
        return all(k.size >= robust.MIN_FOR_INTERVAL for k in self.kept)


def bootstrap(
    samples: list[np.ndarray], statistic: Any, seed: int, n: int = BOOTSTRAP
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile 95 % interval of a vector statistic by scipy.stats.bootstrap, resampling each sample
    independently. `statistic(*samples)` gets arrays (resamples, n_i) and returns (resamples, outputs)."""
    import warnings

    from scipy.stats import bootstrap as scipy_bootstrap

    def wrapped(*data: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.moveaxis(statistic(*data), -1, 0)  # scipy wants the outputs first

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate resample distribution is fine for percentiles
        res = scipy_bootstrap(
            tuple(samples),
            wrapped,
            n_resamples=n,
            paired=False,
            vectorized=True,
            confidence_level=CONFIDENCE,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    return np.asarray(res.confidence_interval.low), np.asarray(res.confidence_interval.high)


def fit_scaling(
    widths: np.ndarray, seconds: np.ndarray, at: list[float] | None = None, seed: int = 0
) -> ScalingFit:
    """Fit t = A*w + B*w^2 to rows of (width, seconds) and report quadratic shares with 95 % intervals."""
    s = Samples.of(widths, seconds)
    w, med = s.widths, s.medians
    report_at = np.array(sorted({*w.tolist(), *(float(x) for x in at or [])}), dtype=float)

    m_at = len(report_at)

    def statistic(*data: np.ndarray) -> np.ndarray:
        m = np.stack([np.median(d, axis=-1) for d in data], axis=-1)  # (..., k)
        two, three = solve(w, m, False), solve(w, m, True)
        return np.concatenate(
            [shares(two, report_at, False), shares(three, report_at, True), two, three], axis=-1
        )

    margin = CONSTANT_MARGIN * float(med[0])
    c_point = float(solve(w, med, True)[0])
    repeats = min(x.size for x in s.kept)
    bounds = bootstrap(s.kept, statistic, seed) if s.resamplable else None
    c_at = 2 * m_at + 2  # C's column in the statistic
    constant = judge_constant(
        c_point, (float(bounds[0][c_at]), float(bounds[1][c_at])) if bounds else None, margin, repeats
    )
    # a constant is assumed away only once it is shown to be negligible; present or undetermined, the
    # shares come from the model that carries it (unbiased either way, wider intervals when unneeded)
    with_c = constant.verdict != "absent"
    coef = nonneg(w, med, with_c)
    c, a, b = (
        (float(coef[0]), float(coef[1]), float(coef[2])) if with_c else (0.0, float(coef[0]), float(coef[1]))
    )
    point = shares(coef, report_at, with_c)
    ci = None
    if bounds is None:
        ci_reason: str | None = (
            f"fewer than {robust.MIN_FOR_INTERVAL} kept repeats at a width: no interval "
            f"(a median's 95 % interval needs {robust.MIN_FOR_INTERVAL})"
        )
    else:
        lo, hi = bounds
        first = m_at if with_c else 0  # the statistic's shares for the model used
        coef_at = {"C": c_at, "A": c_at + 1, "B": c_at + 2} if with_c else {"A": 2 * m_at, "B": 2 * m_at + 1}
        negative = [n for n, i in coef_at.items() if hi[i] < 0]
        if negative:
            ci_reason = (
                f"{' and '.join(negative)} negative beyond the noise: the timings do not follow "
                f"{'C + ' if with_c else ''}A*w + B*w^2, so no interval is given"
            )
        else:
            ci_reason = None
            ci = {float(x): (float(lo[first + i]), float(hi[first + i])) for i, x in enumerate(report_at)}
    fitted = c + a * w + b * w * w
    return ScalingFit(
        a,
        b,
        c,
        with_c,
        w.tolist(),
        {float(x): float(m) for x, m in zip(w, med, strict=True)},
        {float(x): int(kk.size) for x, kk in zip(w, s.kept, strict=True)},
        {float(x): o.tolist() for x, o in zip(w, s.outliers, strict=True)},
        (med - fitted).tolist(),
        {float(x): float(v) for x, v in zip(report_at, point, strict=True)},
        ci,
        ci_reason,
        constant,
        int(sum(kk.size + o.size for kk, o in zip(s.kept, s.outliers, strict=True))),
        BOOTSTRAP if ci else 0,
    )


# ---- the front door: `tuneproof fit` -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FitSpec:
    """The points CSV to fit, and extra widths (tokens) to report the quadratic share at (None: only
    the measured ones; an empty tuple is refused)."""

    points: Path
    at: tuple[int, ...] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.at is not None:
            validate.integers("at", self.at)


@dataclass(frozen=True, slots=True)
class FitPlan:
    widths: np.ndarray
    seconds: np.ndarray
    at: list[float]
    seed: int


def prepare(spec: FitSpec) -> FitPlan:
    """Read and check the points (every row's units, before any fitting)."""
    widths, seconds = read_points(spec.points)
    return FitPlan(widths, seconds, [float(x) for x in spec.at or ()], spec.seed)


def run(plan: FitPlan, progress: Any = None) -> ScalingFit:
    return fit_scaling(plan.widths, plan.seconds, at=plan.at, seed=plan.seed)
