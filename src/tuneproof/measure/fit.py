"""Step-time scaling fit: t(w) = A*w + B*w^2 (docs/reference-run.md section 2), with honest intervals.

A*w is the work linear in width (GEMMs, elementwise), B*w^2 the quadratic work (attention). The
quadratic share at width w is B*w^2 / t(w).

How the numbers are made:
- Rows are timed repeats. Per width, outlying repeats (`robust.outliers`, on a noise scale pooled over the
  widths: `robust.pooled_scale`) are set aside and named;
  the fit runs on the per-width medians, so one wild repeat cannot bend it. Medians are weighted by
  1/median (relative residuals: step-time noise scales with the step).
- Coefficients shown: non-negative least squares (scipy.optimize.nnls): A, B >= 0. The shares'
  point estimates come from the statistic their intervals are made of: the unconstrained fit's share,
  clipped to [0, 1] (a fresh-eyes trial under load saw the NNLS share 55.6 % beside its interval
  0.0-34.5 %). A share still outside its own interval is listed in `unstable` and not shown as valid.
- Intervals, 6 or more kept repeats at every width: percentile bootstrap (scipy.stats.bootstrap)
  resampling the repeats within each width. Inside the bootstrap the coefficients are unconstrained
  and each share is clipped to [0, 1] only at the end, so a B at the NNLS boundary gets an interval
  [0, upper] that says how much quadratic work the noise still allows, never a false [0, 0].
- Intervals, fewer repeats: t intervals on the pooled residuals (`measure.pooled`, which says why
  not a residual bootstrap), Fieller's for the shares; exact for no noise. Three rows for three
  coefficients leave no residual: no share interval, said so.
- The constant test fits t = C + A*w + B*w^2 and judges C's 95 % interval (from either method, so
  any number of repeats) by equivalence against a negligible band of +-10 % of the smallest width's
  step (`measure.constant`): "present", "absent" or "undetermined" with the repeats per width that
  would decide it. Only an absent constant is dropped from the model: otherwise the shares come from
  t = C + A*w + B*w^2, so an unproven "no overhead" cannot bias them; `model_reason` says which.
- For other callers: `share_interval(widths, seconds, width)` and `ScalingFit.share_ci(width)` give
  one share's interval and how it was made, or None and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.core.verdict import NoWarnings, Verdict
from tuneproof.measure import pooled, robust
from tuneproof.measure.constant import MAX_REPEATS_ADVICE, ConstantTerm, judge_constant
from tuneproof.measure.points import MIN_SPAN, MIN_WIDTHS, Samples, read_points  # noqa: F401 (re-exported)

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


@dataclass(kw_only=True, frozen=True, slots=True)
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
    ci_method: str | None = None  # how the share intervals were made
    model_reason: str = ""  # which model the shares come from, and why
    unstable: tuple[float, ...] = ()  # widths whose share lies outside its own interval

    @property
    def model(self) -> str:
        return "t = C + A*w + B*w^2" if self.constant_in_model else "t = A*w + B*w^2"

    def share_ci(self, width: float) -> tuple[tuple[float, float] | None, str]:
        """The 95 % interval of the quadratic share at a reported width (KeyError for others):
        ((lo, hi), how it was made) or (None, why there is none)."""
        if width not in self.quad_share:
            raise KeyError(width)
        if self.quad_share_ci is None:
            return None, self.ci_reason or "no interval"
        return self.quad_share_ci[width], self.ci_method or ""

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
            "ci_method": self.ci_method,
            "model_reason": self.model_reason,
            "unstable_widths": list(self.unstable),
            "constant": self.constant.to_dict(),
            "num_rows": self.num_rows,
            "num_bootstrap": self.num_bootstrap,
        }


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


ShareCI = tuple[dict[float, tuple[float, float]] | None, str | None, str | None]  # (intervals, why none, how)
_NAMES = ("C", "A", "B")


def _contradicted(negative: list[str], with_c: bool) -> str:
    return (
        f"{' and '.join(negative)} negative beyond the noise: the timings do not follow "
        f"{'C + ' if with_c else ''}A*w + B*w^2, so no interval is given"
    )


def _bootstrap_path(
    s: Samples, report_at: np.ndarray, margin: float, seed: int
) -> tuple[ConstantTerm, Callable[[bool], ShareCI]]:
    """6 or more kept repeats per width: percentile bootstrap of the medians (module docstring)."""
    w, med, m_at = s.widths, s.medians, len(report_at)

    def statistic(*data: np.ndarray) -> np.ndarray:
        m = np.stack([np.median(d, axis=-1) for d in data], axis=-1)  # (..., k)
        two, three = solve(w, m, False), solve(w, m, True)
        return np.concatenate(
            [shares(two, report_at, False), shares(three, report_at, True), two, three], axis=-1
        )

    lo, hi = bootstrap(s.kept, statistic, seed)
    c_at = 2 * m_at + 2  # C's column in the statistic
    repeats = min(x.size for x in s.kept)
    interval = (float(lo[c_at]), float(hi[c_at]))
    constant = judge_constant(float(solve(w, med, True)[0]), interval, margin, repeats)
    how = f"95 % percentile bootstrap ({BOOTSTRAP} resamples of the repeats)"

    def share_ci(with_c: bool) -> ShareCI:
        first = m_at if with_c else 0  # the statistic's shares for the model used
        coef_at = {"C": c_at, "A": c_at + 1, "B": c_at + 2} if with_c else {"A": 2 * m_at, "B": 2 * m_at + 1}
        negative = [n for n, i in coef_at.items() if hi[i] < 0]
        if negative:
            return None, _contradicted(negative, with_c), None
        return (
            {float(x): (float(lo[first + i]), float(hi[first + i])) for i, x in enumerate(report_at)},
            None,
            how,
        )

    return constant, share_ci


def _pooled_path(
    s: Samples, report_at: np.ndarray, margin: float
) -> tuple[ConstantTerm, Callable[[bool], ShareCI]]:
    """Fewer than 6 kept repeats at a width: t intervals on the pooled residuals (`measure.pooled`)."""
    w, med = s.widths, s.medians
    three = pooled.fit(w, s.kept, med, True)
    scale_from = three if three.has_scale else pooled.fit(w, s.kept, med, False)
    on = "t on the per-width medians" if scale_from.lost_per_width else "t"
    basis = f"{on}, pooled residuals, df {scale_from.df}" + (
        "" if three.has_scale else " of the two-term fit: no residual is left for three coefficients"
    )
    basis += f"; {scale_from.note}" if scale_from.note else ""
    form = np.array([1.0, 0.0, 0.0])
    half = three.halfwidth(form, scale_from.s, scale_from.df)
    c = float(three.coef[0])

    def to_decide(target: float) -> int | None:
        return three.repeats_to_shrink(form, target, scale_from.s, MAX_REPEATS_ADVICE)

    constant = judge_constant(c, (c - half, c + half), margin, three.rows_per_width, to_decide, basis)
    if not three.has_scale and constant.verdict == "undetermined":
        constant = replace(
            constant,
            reason=constant.reason + " (the two-term fit's residual, used as the noise here, holds any "
            "real constant too: a second repeat per width gives the noise its own estimate and may decide "
            "it sooner)",
        )

    def share_ci(with_c: bool) -> ShareCI:
        pf = three if with_c else pooled.fit(w, s.kept, med, False)
        if not pf.has_scale:
            return (
                None,
                (
                    f"{pf.df + len(pf.coef)} rows for {len(pf.coef)} coefficients: no residual is left to "
                    "estimate the noise (time a second repeat per width, or another width)"
                ),
                None,
            )
        names = _NAMES if with_c else _NAMES[1:]
        negative = [n for j, n in enumerate(names) if pf.coef_interval(j)[1] < 0]
        if negative:
            return None, _contradicted(negative, with_c), None
        form_name = "the per-width medians, " if pf.lost_per_width else ""
        how = (
            f"95 % t interval from {form_name}the pooled residuals (df {pf.df}; "
            f"fewer than {robust.MIN_FOR_INTERVAL} repeats at a width)" + (f"; {pf.note}" if pf.note else "")
        )
        return {float(x): pf.share_interval(float(x)) for x in report_at}, None, how

    return constant, share_ci


def _model_reason(constant: ConstantTerm, two_term: float, widest: float) -> str:
    """Which model the shares come from, and why (the constant test decides)."""
    if constant.verdict == "absent":
        return "two-term model t = A*w + B*w^2: the constant is absent (negligible), so it is dropped"
    if constant.verdict == "present":
        return "three-term model t = C + A*w + B*w^2: the constant is present"
    return (
        "three-term model t = C + A*w + B*w^2: the constant is undetermined and an unproven "
        f"'no overhead' is not assumed (the two-term model would give {100 * two_term:.1f} % at {widest:g})"
    )


def fit_scaling(
    widths: np.ndarray, seconds: np.ndarray, at: list[float] | None = None, seed: int = 0
) -> ScalingFit:
    """Fit t = A*w + B*w^2 to rows of (width, seconds) and report quadratic shares with 95 % intervals."""
    s = Samples.of(widths, seconds)
    w, med = s.widths, s.medians
    report_at = np.array(sorted({*w.tolist(), *(float(x) for x in at or [])}), dtype=float)
    margin = CONSTANT_MARGIN * float(med[0])
    constant, share_ci = (
        _bootstrap_path(s, report_at, margin, seed) if s.resamplable else _pooled_path(s, report_at, margin)
    )
    # a constant is assumed away only once it is shown to be negligible; present or undetermined, the
    # shares come from the model that carries it (unbiased either way, wider intervals when unneeded)
    with_c = constant.verdict != "absent"
    coef = nonneg(w, med, with_c)
    c, a, b = (
        (float(coef[0]), float(coef[1]), float(coef[2])) if with_c else (0.0, float(coef[0]), float(coef[1]))
    )
    point = shares(solve(w, med, with_c), report_at, with_c)  # the intervals' own statistic
    ci, ci_reason, ci_method = share_ci(with_c)
    two_term = float(shares(solve(w, med, False), report_at[-1:], False)[0])
    slack = 1e-3  # a tenth of a point, what the table shows
    unstable = tuple(float(x) for x, v in zip(report_at, point, strict=True)
                     if ci and not ci[float(x)][0] - slack <= v <= ci[float(x)][1] + slack)  # fmt: skip
    fitted = c + a * w + b * w * w
    return ScalingFit(
        a=a,
        b=b,
        c=c,
        constant_in_model=with_c,
        widths=w.tolist(),
        medians={float(x): float(m) for x, m in zip(w, med, strict=True)},
        rows={float(x): int(kk.size) for x, kk in zip(w, s.kept, strict=True)},
        outliers={float(x): o.tolist() for x, o in zip(w, s.outliers, strict=True)},
        residuals_s=(med - fitted).tolist(),
        quad_share={float(x): float(v) for x, v in zip(report_at, point, strict=True)},
        quad_share_ci=ci,
        ci_reason=ci_reason,
        constant=constant,
        num_rows=int(sum(kk.size + o.size for kk, o in zip(s.kept, s.outliers, strict=True))),
        num_bootstrap=BOOTSTRAP if ci and s.resamplable else 0,
        ci_method=ci_method,
        model_reason=_model_reason(constant, two_term, float(report_at[-1])),
        unstable=unstable,
    )


def share_interval(
    widths: np.ndarray, seconds: np.ndarray, width: float, seed: int = 0
) -> tuple[tuple[float, float] | None, str]:
    """The 95 % interval of the quadratic share B*w^2 / t(w) at `width` (measured or not) from the fit
    of these timed rows (one per repeat), in the model the constant test picks: ((lo, hi), how it was
    made) or (None, why there is none). Shares are clipped to [0, 1]."""
    return fit_scaling(widths, seconds, at=[float(width)], seed=seed).share_ci(float(width))


# ---- the front door: `tuneproof fit` -------------------------------------------------------------


def require_growth(fit: ScalingFit, widths: np.ndarray, source: str) -> None:
    """Refuse a fit whose linear and quadratic terms are both 0: the times do not grow with width
    (noise, too short a probe, or times that fall), so shares and projections would be made up."""
    if fit.a > 0 or fit.b > 0:
        return
    across = f"{int(np.min(widths)):,}-{int(np.max(widths)):,}"
    raise TuneproofError(
        f"the step times ({source}) do not grow with width across {across} tokens (the fit's linear "
        "and quadratic terms are both 0): the timing noise covers the width's effect",
        "time longer or on a quieter machine (a larger probe budget), or over a wider span of widths",
    )
