"""Cross-check the step-time fit against the profiler's kernel table, like with like.

Two instruments measure the same quantity, the share of step time that grows with the square of the
width, at the profiled width w*:
- the timer: the fit of the timed steps, B*w*^2 / t(w*);
- the profiler: the same fit of the profiled time at every width (kernels plus the idle gaps between
  them, so that host overhead counts on both sides; per width, the median of the profiles),
  b*w*^2 / T(w*). T is summed kernel time plus idle time (`PROFILE_BASIS`): on one stream that is the
  wall time from the first kernel's start to the last one's end; with overlapping streams it exceeds
  the wall time by the overlap, and the class shares stay shares of summed kernel time
  (tuneproof.trace.timeline gives the wall-time view).
They share no assumption but the model (both carry a constant term when the step fit does). The
verdict is on their gap. The profiler then attributes the quadratic share: every kernel class is
fitted the same way, with the same weights, so the classes' quadratic parts add up to the profiler's
quadratic share exactly. That says whether the quadratic term is attention, and the attention class
splits into quadratic, linear and constant parts; the reference run's comparison (quadratic share of the fit
against the attention share of the kernels, 67.8 % vs 65.2 %) is printed with its gap explained:

    quad share (fit) - attention share
        = [fit - profiler] + [quadratic work outside attention] - [attention's linear and constant parts]

Uncertainty: one joint percentile bootstrap resamples the timed repeats and the profiles within each
width. Agreement (equivalence logic, `judge_agreement`) on the gap's 95 % interval:
- agree: the whole interval lies within +-TOLERANCE points;
- disagree: the whole interval lies outside it (the gap exceeds both measurements' combined noise by
  more than the tolerance);
- inconclusive: anything else, or no interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneproof.core.verdict import OK, Verdict
from tuneproof.measure.fit import bootstrap, shares, solve
from tuneproof.measure.kernels import PROFILE_COLUMNS

# How far two measurements of one share may differ and still be the same number: the reference run's two
# measurements agreed to 2.6 points; 5 points leaves room for the profiler's own overhead without
# hiding a real disagreement.
TOLERANCE_POINTS = 5.0
# what the profiler's shares are of (KernelTable.ms per class is summed kernel time, idle_ms the window
# minus the union of the kernels): the same as wall time on one stream
PROFILE_BASIS = "summed kernel time plus idle gaps (wall time on one stream)"
MIN_PROFILES = 2
MIN_REPEATS = 6  # a 95 % interval of a median needs 6 values (tuneproof.measure.robust)


@dataclass(kw_only=True, frozen=True, slots=True)
class Agreement:
    """Whether the two instruments agree: the outcome, the gap (points, timer minus profiler) and its
    95 % interval, the tolerance it was judged against, and the reason in words."""

    outcome: str  # "agree" | "disagree" | "inconclusive"
    gap: float
    interval: tuple[float, float] | None
    tolerance: float
    reason: str

    def as_verdict(self) -> Verdict:
        """As the one verdict type (exit 0: a probe reports its cross-check, it does not fail on it):
        `margin` is |gap| beyond the tolerance (negative inside it), `noise` the interval's half-width."""
        half = (self.interval[1] - self.interval[0]) / 2 if self.interval else None
        return Verdict(
            outcome=self.outcome,
            reason=self.reason,
            exit_code=OK,
            margin=abs(self.gap) - self.tolerance,
            noise=half,
        )


def judge_agreement(
    gap: float, interval: tuple[float, float] | None, tolerance: float = TOLERANCE_POINTS
) -> Agreement:
    """Equivalence logic on the gap's 95 % interval (points): inside +-tolerance agree, wholly outside
    disagree, otherwise (or without an interval) inconclusive."""
    if interval is None:
        return Agreement(
            outcome="inconclusive",
            gap=gap,
            interval=None,
            tolerance=tolerance,
            reason=f"gap {gap:+.1f} points with no interval: cannot judge",
        )
    lo, hi = interval
    span = f"gap {gap:+.1f} points, 95 % interval [{lo:+.1f}, {hi:+.1f}] vs +-{tolerance:g}"
    if -tolerance <= lo and hi <= tolerance:
        return Agreement(
            outcome="agree",
            gap=gap,
            interval=interval,
            tolerance=tolerance,
            reason=f"{span}: the whole interval is within the tolerance",
        )
    if hi < -tolerance or lo > tolerance:
        return Agreement(
            outcome="disagree",
            gap=gap,
            interval=interval,
            tolerance=tolerance,
            reason=f"{span}: the whole interval is outside the tolerance, beyond both measurements' noise",
        )
    return Agreement(
        outcome="inconclusive",
        gap=gap,
        interval=interval,
        tolerance=tolerance,
        reason=f"{span}: the interval straddles the tolerance, so the noise allows agreement and "
        "disagreement",
    )


@dataclass(kw_only=True, slots=True)
class CrossCheck:
    """Both instruments at `width`, in shares of step time (0-1), their 95 % intervals, the verdict."""

    width: int
    values: dict[str, float]
    intervals: dict[str, tuple[float, float]] | None
    verdict: Agreement
    notes: list[str] = field(default_factory=list)
    attributable: bool = True  # the profiled time's unconstrained fit is inside the model
    comparison: Comparison | None = None  # the reference run's comparison with its terms' intervals

    @property
    def explanation(self) -> list[str]:
        if not self.attributable:
            return []
        v = {k: 100 * x for k, x in self.values.items()}
        outside = {
            c: v[f"quadratic_{c}"]
            for c in PROFILE_COLUMNS
            if c != "attention" and abs(v[f"quadratic_{c}"]) >= 0.05
        }
        parts = ", ".join(f"{c} {x:+.1f}" for c, x in sorted(outside.items(), key=lambda kv: -abs(kv[1])))
        summed = sum(v[f"quadratic_{c}"] for c in PROFILE_COLUMNS)
        whose = (
            f"of the profiler's {summed:.1f} % quadratic share (the fit without the sign constraint, whose "
            f"class parts add up; {v['quad_share_kernels']:.1f} % with it)"
            if abs(summed - v["quad_share_kernels"]) >= 0.05
            else f"of the profiler's {v['quad_share_kernels']:.1f} % quadratic share"
        )
        return [
            f"{whose}, attention kernels carry "
            f"{v['quadratic_attention']:.1f} points"
            + (f"; outside them: {parts} points" if parts else "; nothing outside them"),
            f"attention kernels take {v['attention_share']:.1f} % of profiled time at width {self.width}: "
            f"{v['quadratic_attention']:.1f} points quadratic in width, {v['attention_linear']:.1f} linear"
            + (f", {v['attention_constant']:.1f} constant" if v["attention_constant"] else ""),
            (self.comparison or Comparison.of(self.values, None, self.notes, self.verdict.tolerance)).line(
                v["quad_share_fit"], v["attention_share"]
            ),
        ]

    def line(self) -> str:
        v = self.values
        return (
            f"quadratic share at width {self.width}: {100 * v['quad_share_fit']:.1f} % (step-time fit) vs "
            f"{100 * v['quad_share_kernels']:.1f} % (profiled kernels): {self.verdict.outcome} "
            f"({self.verdict.reason})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "profiled_time_basis": PROFILE_BASIS,
            **self.values,
            "intervals": {k: list(ci) for k, ci in self.intervals.items()} if self.intervals else None,
            "gap_points": self.verdict.gap,
            "gap_interval_points": list(self.verdict.interval) if self.verdict.interval else None,
            "tolerance_points": self.verdict.tolerance,
            "verdict": self.verdict.outcome,
            "reason": self.verdict.reason,
            "explanation": self.explanation,
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "notes": self.notes,
        }


OUTPUTS = (
    "quad_share_fit",
    "quad_share_kernels",
    *(f"quadratic_{c}" for c in PROFILE_COLUMNS),
    "quadratic_outside_attention",
    "attention_linear",
    "attention_constant",
    "attention_share",
)


def cross_check(
    widths: Sequence[float],
    timed: Sequence[np.ndarray],
    kernel_ms: Sequence[np.ndarray],
    *,
    at: float,
    constant: bool = False,
    tolerance: float = TOLERANCE_POINTS,
    seed: int = 0,
) -> CrossCheck:
    """Judge the step-time fit's quadratic share against the profiled kernels' at width `at`.

    Per width (ascending): `timed` holds the kept step times; `kernel_ms` is an array (profiles,
    columns) of milliseconds per kernel class and idle gap, in `PROFILE_COLUMNS` order. `constant`:
    fit with a constant term (the step fit carries one)."""
    w = np.asarray(widths, dtype=float)
    at_arr = np.array([float(at)])
    j = int(np.flatnonzero(w == float(at))[0])
    per = [np.asarray(k, dtype=float).reshape(-1, len(PROFILE_COLUMNS)) for k in kernel_ms]
    k = len(w)
    att = PROFILE_COLUMNS.index("attention")

    def statistic(*data: np.ndarray) -> np.ndarray:
        times, picks = data[:k], data[k:]
        m_t = np.stack([np.median(d, axis=-1) for d in times], axis=-1)  # (..., k)
        # per width: median over the picked profiles of each class -> (..., k, classes)
        m_c = np.stack([np.median(per[i][picks[i].astype(np.int64)], axis=-2) for i in range(k)], axis=-2)
        total = m_c.sum(axis=-1)  # (..., k)
        q_fit = shares(solve(w, m_t, constant), at_arr, constant)[..., 0]
        q_kern = shares(solve(w, total, constant), at_arr, constant)[..., 0]
        denom = total[..., j]
        coef = [solve(w, m_c[..., c], constant, scale_by=total) for c in range(len(PROFILE_COLUMNS))]
        quad = [cc[..., -1] * at * at / denom for cc in coef]
        out = [q_fit, q_kern, *quad, sum(quad) - quad[att]]
        out += [coef[att][..., -2] * at / denom]  # attention's linear part
        out += [coef[att][..., 0] / denom if constant else np.zeros_like(denom)]
        out += [m_c[..., j, att] / denom]
        return np.stack(out + comparison_terms(out[0], out[1], *out[-4:]), axis=-1)

    picks = [np.arange(p.shape[0], dtype=float) for p in per]
    point = statistic(*timed, *picks)
    values = {name: float(point[i]) for i, name in enumerate(OUTPUTS)}
    # Every value, shares included, is the bootstrap's own statistic on the data (unconstrained fits,
    # shares clipped to [0, 1]), so an estimate and its interval come from one statistic (the NNLS
    # shares did not: a trial under load printed gap +39.8 [-51.4, +34.2]).
    gap = 100 * (values["quad_share_fit"] - values["quad_share_kernels"])
    notes = []
    # the classes' parts add up to the unconstrained fit's quadratic share; outside 0-100 % they are
    # not parts of anything (a fresh-eyes trial under load saw "911 %" and "-352 points linear")
    unconstrained = sum(values[f"quadratic_{c}"] for c in PROFILE_COLUMNS)
    attributable = 0.0 <= unconstrained <= 1.0
    if not attributable:
        notes.append(
            f"the profiled time does not follow {'C + ' if constant else ''}A*w + B*w^2 at these widths "
            f"(without the sign constraint its quadratic share would be {100 * unconstrained:.0f} %): "
            "no attribution by kernel class"
        )
    few = [int(w[i]) for i, t in enumerate(timed) if t.size < MIN_REPEATS]
    thin = [int(w[i]) for i, p in enumerate(per) if p.shape[0] < MIN_PROFILES]
    if few or thin:
        intervals, term_ci = None, None
        verdict = judge_agreement(gap, None, tolerance)
        if few:
            notes.append(f"widths {few} have fewer than {MIN_REPEATS} kept repeats: no interval")
        if thin:
            notes.append(f"widths {thin} were profiled fewer than {MIN_PROFILES} times: no interval")
    else:
        lo, hi = bootstrap([*timed, *picks], statistic, seed)
        intervals = {name: (float(lo[i]), float(hi[i])) for i, name in enumerate(OUTPUTS)}
        term_ci = {n: (100 * float(lo[len(OUTPUTS) + i]), 100 * float(hi[len(OUTPUTS) + i]))
                   for i, n in enumerate(TERMS)}  # fmt: skip
        verdict = judge_agreement(gap, term_ci["timer_vs_profiler"], tolerance)
        verdict = _unstable(values, intervals, verdict, notes)
    comparison = Comparison.of(values, term_ci, notes, tolerance)
    return CrossCheck(width=int(at), values=values, intervals=intervals, verdict=verdict, notes=notes,
                      attributable=attributable, comparison=comparison)  # fmt: skip


# The reference run's comparison, quad share (fit) - attention share (kernels), and its terms, which add
# up to it exactly (in every bootstrap resample too, so each term's interval is of the same resamples).
TERMS = ("comparison_gap", "timer_vs_profiler", "quadratic_outside_attention",
         "attention_non_quadratic", "fit_residual")  # fmt: skip
TERM_LABELS = {
    "timer_vs_profiler": "timer vs profiler",
    "quadratic_outside_attention": "quadratic outside attention",
    "attention_non_quadratic": "attention's non-quadratic part",
    "fit_residual": "fit residual",
}


def comparison_terms(
    q_fit: Any, q_kern: Any, outside: Any, linear: Any, constant: Any, attention: Any
) -> list[Any]:
    """[gap, its terms] (shares, 0-1): gap = q_fit - attention = (q_fit - q_kern) + outside
    - (linear + constant) + residual, the residual being what the class fits leave of the profiler's."""
    gap, timer = q_fit - attention, q_fit - q_kern
    rest = -(linear + constant)
    return [gap, timer, outside, rest, gap - timer - outside - rest]


@dataclass(kw_only=True, frozen=True, slots=True)
class Comparison:
    """The reference run's comparison in points: the gap, each term, their 95 % intervals (None with
    `no_interval_reason`), and a verdict on the gap (inside the noise: inconclusive)."""

    points: dict[str, float]  # TERMS -> points
    intervals: dict[str, tuple[float, float]] | None
    verdict: Agreement
    no_interval_reason: str | None

    @classmethod
    def of(
        cls,
        values: dict[str, float],
        intervals: dict[str, tuple[float, float]] | None,
        notes: list[str],
        tolerance: float,
    ) -> Comparison:
        v = values
        names = ("quad_share_fit", "quad_share_kernels", "quadratic_outside_attention", "attention_linear",
                 "attention_constant", "attention_share")  # fmt: skip
        terms = comparison_terms(*(v[n] for n in names))
        points = {n: 100 * float(x) for n, x in zip(TERMS, terms, strict=True)}
        gap_ci = intervals["comparison_gap"] if intervals else None
        reason = None if intervals else "; ".join(n for n in notes if "no interval" in n) or "no interval"
        return cls(
            points=points,
            intervals=intervals,
            verdict=judge_agreement(points["comparison_gap"], gap_ci, tolerance),
            no_interval_reason=reason,
        )

    def interval_text(self, name: str) -> str:
        ci = self.intervals[name] if self.intervals else None
        return f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else ""

    def line(self, fit: float, attention: float) -> str:
        p = self.points
        parts = " ".join(
            f"{p[n]:+.1f}{self.interval_text(n)} {label}"
            for n, label in TERM_LABELS.items()
            if n != "fit_residual" or abs(p[n]) >= 0.05
        )
        why = f" (no interval: {self.no_interval_reason})" if self.no_interval_reason else ""
        return (
            f"the reference run's comparison, quadratic share (fit) {fit:.1f} % vs attention share (kernels) "
            f"{attention:.1f} %: gap {p['comparison_gap']:+.1f}{self.interval_text('comparison_gap')} points "
            f"= {parts}; {self.verdict.outcome}{why} (95 % intervals in brackets)"
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for n in TERMS:
            out[f"{n}_points"] = self.points[n]
            out[f"{n}_interval"] = list(self.intervals[n]) if self.intervals else None
        return {**out, "no_interval_reason": self.no_interval_reason, "verdict": self.verdict.outcome,
                "reason": self.verdict.reason}  # fmt: skip


def _unstable(
    values: dict[str, float], intervals: dict[str, tuple[float, float]], verdict: Agreement, notes: list[str]
) -> Agreement:
    """`verdict`, or inconclusive when a share shown lies outside its own bootstrap interval (the
    sign-constrained share and the bootstrap's unconstrained ones part ways: an unstable fit)."""
    slack = 1e-3  # a tenth of a point: what the table shows; below it, float rounding
    outside = [k for k in ("quad_share_fit", "quad_share_kernels")
               if not intervals[k][0] - slack <= values[k] <= intervals[k][1] + slack]  # fmt: skip
    if not outside:
        return verdict
    shown = ", ".join(
        f"{k} {100 * values[k]:.1f} % outside its interval "
        f"[{100 * intervals[k][0]:.1f}, {100 * intervals[k][1]:.1f}] %"
        for k in outside
    )
    notes.append(f"{shown}: the fit is unstable at these widths")
    return Agreement(
        outcome="inconclusive",
        gap=verdict.gap,
        interval=verdict.interval,
        tolerance=verdict.tolerance,
        reason=f"{shown}: the fit is unstable, cannot judge",
    )
