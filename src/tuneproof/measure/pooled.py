"""Intervals from the pooled residuals: the fit's intervals when a width has fewer than 6 kept repeats.

With fewer than 6 repeats a width's median has no distribution-free interval and resampling 3 repeats
gives at most 10 distinct medians, so the percentile bootstrap cannot say how wide the noise is. The
noise is then read from every row at once. Two forms, by what the rows allow:

- 2 or more kept rows at every width (`fit_medians`, the robust form): the fit runs on the per-width
  medians, as the point estimate does, so a slow repeat the outlier rule kept moves one median a little
  instead of pulling a least-squares line. The noise is each row's relative residual from its width's
  median, e_ij = t_ij / m_i - 1, pooled: s^2 = sum e^2 / (rows - widths). A median of n rows varies as
  (pi / 2) s^2 / n (its large-sample variance for normal noise; for 3 rows the exact factor is smaller, so
  the interval errs wide), so the medians are weighted by n_i and the coefficients' covariance is s^2 (X'
  W X)^-1. Where more widths than coefficients let the fit's own residuals speak, a lack of fit beyond the
  noise (chi-square test at 5 %) widens s by it. Measured (tests/measure/test_fit_coverage.py, 4 widths,
  3 % noise, 10 % of repeats 1.2-2x slow): the share's interval covers 96-98 % and a constant at the band
  edge is called present 1.8 % of the time; the rows form, which fitted every row by least squares, had
  93 % and 4.3 % there (the slow repeats bent it).
- 1 row at some width (`fit_rows`): each kept row t_ij = [C +] A*w_i + B*w_i^2 + m_i * e_ij, e_ij
  independent N(0, sigma^2): relative noise. Rows are divided by m_i and fitted by ordinary least squares
  (widths scaled by the largest one), s^2 = RSS / df, df = rows - coefficients: the residuals hold the
  within-width spread and any lack of fit across widths, so a model the timings do not follow widens
  the intervals instead of hiding. With one row per width and more widths than coefficients, s is the
  fit residuals' own scale.
- Coefficients: estimate +- t(0.975, df) * s * sqrt((X'X)^-1_jj), Student's t because s itself comes
  from few degrees of freedom (df 6 for 3 widths x 3 repeats: t = 2.45, not 1.96).
- A share B*w^2 / t(w) is a ratio of two linear forms of the coefficients: its interval is Fieller's
  (the shares s0 whose linear form B*w^2 - s0*t(w) a t-test cannot tell from 0), exact under the
  model, clipped to [0, 1]; a t(w) not distinguishable from 0 gives [0, 1].
- Why not a residual bootstrap: at 9 rows the resampled residuals are shrunk (each has variance
  sigma^2 * (1 - h_ii)) and the percentile interval ignores that sigma is estimated from 6 degrees of
  freedom, so it under-covers exactly where it is used (a pooled residual bootstrap of the medians was
  tried for issue 33: 86-94 % under the outliers above); the t interval accounts for both, and it is
  exact at the two ends: no noise gives s = 0 and the interval [estimate, estimate], tiny noise a
  tiny interval around the truth (tests/measure/test_fit.py checks both).
- Three rows for three coefficients (three widths, one row each) leave no residual for C's own
  model; C's interval then takes s from the two-term model (df 1). A real C inflates that s, so the
  interval only widens: it can show C absent (three points on a curve through the origin within the
  noise), never present. Worked through: C-hat is then a fixed multiple of the one residual, the
  interval is C-hat +- 12.7 |C-hat|, and under |C| = margin the chance to call it absent is at most 3.5 %.
- The repeats that would decide (`repeats_to_shrink`): the fewest per width, more than taken, at which
  the test decides 80 % of the time if the estimate is the truth and the noise stays: (t_0.975 + t_0.8)
  x the standard error below the distance to the band's edge (the half-width alone would decide half
  the time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tuneproof.core.quantiles import t_quantile

CONFIDENCE = 0.95
POWER = 0.80
MEDIAN_VARIANCE = math.pi / 2  # var(median of n) ~ (pi / 2) sigma^2 / n for normal noise


@dataclass(kw_only=True, frozen=True, slots=True)
class PooledFit:
    """Least squares of the relative rows with its pooled residual scale (coefficients on w / ref)."""

    coef: np.ndarray  # [C,] A, B on the scaled widths
    cov_unit: np.ndarray  # (X'X)^-1: times s^2, the coefficients' covariance
    s: float  # pooled residual standard error (relative), NaN when df = 0
    df: int
    ref: float
    constant: bool
    rows_per_width: int  # the fewest kept rows at a width (what "repeats" means for the advice)
    num_widths: int
    lost_per_width: bool = False  # df = rows - widths (the medians form), not rows - coefficients
    note: str = ""  # what widened s, if anything

    @property
    def has_scale(self) -> bool:
        return self.df > 0 and math.isfinite(self.s)

    def halfwidth(self, form: np.ndarray, s: float | None = None, df: int | None = None) -> float:
        """t * s * sqrt(form' (X'X)^-1 form): the 95 % half-width of a linear form of the coefficients."""
        scale = self.s if s is None else s
        return (
            t_quantile(self.df if df is None else df) * scale * math.sqrt(float(form @ self.cov_unit @ form))
        )

    def coef_interval(self, j: int) -> tuple[float, float]:
        """The 95 % interval of coefficient j, in the units of the unscaled widths."""
        form = np.zeros(len(self.coef))
        form[j] = 1.0
        h = self.halfwidth(form)
        factor = self.ref ** -(j + (0 if self.constant else 1))  # C, A, B: w^0, w^-1, w^-2
        c = float(self.coef[j])
        return (c - h) * factor, (c + h) * factor

    def share_interval(self, width: float) -> tuple[float, float]:
        """Fieller's 95 % interval of B*w^2 / t(w) at `width`, clipped to [0, 1] (module docstring)."""
        u = width / self.ref
        tau = np.array(([1.0] if self.constant else []) + [u, u * u])
        q = np.zeros_like(tau)
        q[-1] = u * u
        k = t_quantile(self.df) ** 2 * self.s**2
        qq, tt = float(q @ self.coef), float(tau @ self.coef)
        vqq, vqt, vtt = (float(x @ self.cov_unit @ y) for x, y in ((q, q), (q, tau), (tau, tau)))
        a, b, c = tt * tt - k * vtt, qq * tt - k * vqt, qq * qq - k * vqq
        if a <= 0:  # t(w) not distinguishable from 0: the ratio is unbounded
            return 0.0, 1.0
        root = math.sqrt(max(b * b - a * c, 0.0))  # >= 0 but for rounding: the estimate is in the set
        lo, hi = (b - root) / a, (b + root) / a
        return min(max(lo, 0.0), 1.0), min(max(hi, 0.0), 1.0)

    def repeats_to_shrink(self, form: np.ndarray, target: float, s: float, limit: int) -> int | None:
        """The fewest repeats per width, more than taken, at which a test whose estimate sits `target`
        inside (or beyond) a band edge decides 80 % of the time, the noise per row staying s:
        (t(df_n) + t_0.8(df_n)) * SE_n < target, SE_n = SE_now * sqrt(n_now / n); None past `limit`."""
        from scipy.stats import t as student

        if target <= 0:
            return None
        base = math.sqrt(float(form @ self.cov_unit @ form)) * s * math.sqrt(self.rows_per_width)
        lost = self.num_widths if self.lost_per_width else len(self.coef)

        def decides(n: int) -> bool:  # monotone in n: the test only sharpens with more repeats
            df = self.num_widths * n - lost
            return df > 0 and (t_quantile(df) + float(student.ppf(POWER, df))) * base / math.sqrt(n) < target

        low, high = self.rows_per_width + 1, limit
        if low > high or not decides(high):
            return None
        while low < high:  # bisection: the first n that decides
            mid = (low + high) // 2
            low, high = (low, mid) if decides(mid) else (mid + 1, high)
        return low


def fit_rows(widths: np.ndarray, kept: list[np.ndarray], medians: np.ndarray, constant: bool) -> PooledFit:
    """Least squares of every kept row, each divided by its width's median (module docstring)."""
    ref = float(widths.max())
    w = np.concatenate([np.full(k.size, x / ref) for x, k in zip(widths, kept, strict=True)])
    m = np.concatenate([np.full(k.size, mm) for mm, k in zip(medians, kept, strict=True)])
    y = np.concatenate(kept) / m
    cols = ([np.ones_like(w)] if constant else []) + [w, w * w]
    x = np.stack(cols, axis=-1) / m[:, None]
    cov_unit = np.linalg.inv(x.T @ x)
    coef = cov_unit @ (x.T @ y)
    resid = y - x @ coef
    df = int(y.size - x.shape[1])
    s = math.sqrt(float(resid @ resid) / df) if df > 0 else math.nan
    return PooledFit(
        coef=coef,
        cov_unit=cov_unit,
        s=s,
        df=df,
        ref=ref,
        constant=constant,
        rows_per_width=min(k.size for k in kept),
        num_widths=len(widths),
    )


def fit_medians(widths: np.ndarray, kept: list[np.ndarray], medians: np.ndarray, constant: bool) -> PooledFit:
    """The robust form (module docstring): weighted least squares of the per-width medians, the noise
    from every row's residual about its width's median. Needs 2 or more kept rows at every width."""
    from scipy.stats import chi2

    ref = float(widths.max())
    n = np.array([k.size for k in kept], dtype=float)
    resid = np.concatenate([k / m - 1.0 for k, m in zip(kept, medians, strict=True)])
    df = int(resid.size - len(widths))
    s = math.sqrt(float(resid @ resid) / df) if df > 0 else math.nan
    u = widths / ref
    x = np.stack(([np.ones_like(u)] if constant else []) + [u, u * u], axis=-1) / medians[:, None]
    weight = n / MEDIAN_VARIANCE  # 1 / var of each relative median, in units of s^2
    cov_unit = np.linalg.inv(x.T @ (x * weight[:, None]))
    coef = cov_unit @ (x.T @ weight)  # the relative medians are 1
    lack = len(widths) - x.shape[1]
    note = ""
    if lack > 0 and math.isfinite(s) and s > 0:
        fit_resid = 1.0 - x @ coef
        stat = float(fit_resid @ (fit_resid * weight)) / s**2
        if stat > float(chi2.ppf(0.95, lack)):
            s *= math.sqrt(stat / lack)
            note = (
                f"widened {math.sqrt(stat / lack):.2f}x: the medians miss the model by more than their noise"
            )
    return PooledFit(
        coef=coef,
        cov_unit=cov_unit,
        s=s,
        df=df,
        ref=ref,
        constant=constant,
        rows_per_width=int(n.min()),
        num_widths=len(widths),
        lost_per_width=True,
        note=note,
    )


def fit(widths: np.ndarray, kept: list[np.ndarray], medians: np.ndarray, constant: bool) -> PooledFit:
    """The medians form where every width has 2 or more kept rows, else the rows form."""
    if min(k.size for k in kept) >= 2:
        return fit_medians(widths, kept, medians, constant)
    return fit_rows(widths, kept, medians, constant)
