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

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.errors import TuneproofError
from tuneproof.io import input_file
from tuneproof.measure import robust

MIN_WIDTHS = 3
MIN_SPAN = 4.0
BOOTSTRAP = 2000
CONFIDENCE = 0.95
CONSTANT_MARGIN = 0.10  # of the smallest width's step time: a smaller constant cannot make a run launch-bound
MAX_REPEATS_ADVICE = 1000
MAX_WIDTH = 1 << 30  # tokens: beyond any context length, and w^2 stays far from float overflow
MIN_SECONDS, MAX_SECONDS = 1e-9, 1e7  # a nanosecond to four months per step: outside is a unit mistake


def read_points(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a `width,seconds` CSV (one row per repeat; other columns are ignored). Errors name the line."""
    p = input_file(path, "points file", "pass a CSV with a 'width,seconds' header")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TuneproofError(
            f"cannot read {p}: {e}", "pass a text CSV with a 'width,seconds' header"
        ) from None
    try:
        reader = csv.DictReader(text.splitlines())
        header = [h.strip() for h in reader.fieldnames or []]
    except csv.Error as e:
        raise TuneproofError(f"{p}: not a CSV: {e}", "the first line must be 'width,seconds'") from None
    missing = [c for c in ("width", "seconds") if c not in header]
    if missing:
        raise TuneproofError(
            f"{p}: missing column {', '.join(missing)} (header: {','.join(header) or 'none'})",
            "the first line must be 'width,seconds'",
        )
    widths, seconds = [], []
    try:
        for line, row in enumerate(reader, start=2):
            clean = {k.strip(): v for k, v in row.items() if isinstance(k, str)}
            w, t = _number(clean.get("width")), _number(clean.get("seconds"))
            if w is None or t is None:
                raise TuneproofError(
                    f"{p}:{line}: not numbers: {clean.get('width')!r}, {clean.get('seconds')!r}",
                    "each row is an integer width and a time in seconds",
                )
            if w <= 0 or not w.is_integer() or w > MAX_WIDTH:
                raise TuneproofError(
                    f"{p}:{line}: width must be a positive integer up to {MAX_WIDTH:,}, got {clean['width']}",
                    "fix that row",
                )
            if not MIN_SECONDS <= t <= MAX_SECONDS:
                raise TuneproofError(
                    f"{p}:{line}: seconds must be in [{MIN_SECONDS:g}, {MAX_SECONDS:g}], "
                    f"got {clean['seconds']}",
                    "a step time is positive; drop or re-measure that row",
                )
            widths.append(w)
            seconds.append(t)
    except csv.Error as e:
        raise TuneproofError(f"{p}: not a CSV: {e}", "one 'width,seconds' row per repeat") from None
    if not widths:
        raise TuneproofError(f"{p} holds no rows", "one 'width,seconds' row per timed repeat")
    return np.asarray(widths), np.asarray(seconds)


def _number(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


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
class ConstantTerm:
    """The fit t = C + A*w + B*w^2 judged against `margin` seconds: present, absent or undetermined."""

    verdict: str  # "present" | "absent" | "undetermined"
    c: float
    interval: tuple[float, float] | None
    margin: float
    repeats_to_decide: int | None
    reason: str

    @property
    def significant(self) -> bool | None:
        """True when present, False when absent, None when undetermined."""
        return {"present": True, "absent": False}.get(self.verdict)

    def to_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "C": self.c,
            "interval": list(self.interval) if self.interval else None,
            "margin": self.margin,
            "repeats_to_decide": self.repeats_to_decide,
            "reason": self.reason,
        }


def judge_constant(
    c: float, interval: tuple[float, float] | None, margin: float, repeats: int
) -> ConstantTerm:
    """Present if the whole interval lies above +margin; absent if it lies inside [-margin, +margin];
    otherwise undetermined, with about how many repeats per width would decide it if the noise stays."""
    if interval is None:
        return ConstantTerm(
            "undetermined",
            c,
            None,
            margin,
            None,
            f"C = {c:.3g} s (unconstrained fit) has no interval (it needs {robust.MIN_FOR_INTERVAL} "
            "kept repeats per width, "
            f"the fewest here is {repeats}): add repeats to test it",
        )
    lo, hi = interval
    where = (
        f"C = {c:.3g} s (unconstrained fit), 95 % interval [{lo:.3g}, {hi:.3g}] s vs a margin of "
        f"{margin:.3g} s (10 % of the smallest step)"
    )
    if lo > margin:
        return ConstantTerm(
            "present",
            c,
            interval,
            margin,
            None,
            f"{where}: per-step overhead that does not scale with width is present (launch- or host-bound)",
        )
    if -margin <= lo and hi <= margin:
        return ConstantTerm(
            "absent",
            c,
            interval,
            margin,
            None,
            f"{where}: any constant is too small to matter, so the launch-/host-bound hypothesis is refuted",
        )
    if hi < -margin:
        return ConstantTerm(
            "undetermined",
            c,
            interval,
            margin,
            None,
            f"{where}: C is negative beyond the noise, so t = C + A*w + B*w^2 does not describe "
            "these timings",
        )
    half = (hi - lo) / 2
    needed = []
    if abs(c) < margin:  # to call it absent, the half-width must shrink to margin - |C|
        needed.append(repeats * (half / (margin - abs(c))) ** 2)
    if c > margin:  # to call it present, it must shrink to C - margin
        needed.append(repeats * (half / (c - margin)) ** 2)
    n = math.ceil(min(needed)) if needed else None
    if n is not None and n > MAX_REPEATS_ADVICE:
        advice = f"more than {MAX_REPEATS_ADVICE} repeats per width would be needed: quieten the machine"
        n = None
    elif n is not None:
        advice = f"about {n} repeats per width would decide it if the noise stays as it is"
    elif c < 0:
        advice = "C is below -margin: more repeats could only show that the model does not fit"
    else:
        advice = "C sits on the margin: repeats alone will not decide it"
    return ConstantTerm(
        "undetermined", c, interval, margin, n, f"{where}: the interval is too wide to say; {advice}"
    )


@dataclass(frozen=True, slots=True)
class ScalingFit:
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
