"""Benchmark results judged per document: each (task, filter, metric) of the two arms paired by doc_id,
with the estimator's own uncertainty (Miller 2024, "Adding Error Bars to Evals": paired differences,
standard errors clustered by document, power).

- 2 or more runs per arm: the clustered t interval (`gate.clustered`): the per-document difference of
  the arms' run means, its SE clustered by document with the run-to-run variance carried, so more
  documents and more runs both add power. The floor (k x the run-to-run SD of one run's mean,
  `stats.measured_floor`) is shown for scale; it must be beaten only where the spec gives one (per task
  or `[benchmarks]`) or asks for practical_floor.
- 1 run in an arm: the run-to-run noise is not measured; exact McNemar for 0/1 metrics, the paired
  bootstrap interval otherwise; the verdict says so.
- Both arms identical on every document and run (a metric at 0 in both, say): "no difference", which
  not-worse passes and better fails.

Hypotheses (the spec's `[benchmarks]`): "not-worse" by more than a margin passes when the interval's worse
end stays above -margin (with no margin: the tuned arm better, the interval above 0) and fails when the
whole interval lies below -margin; "better" passes with the interval above the margin (default 0), and
fails on a significant drop. Everything else is INCONCLUSIVE, with the power now and the documents or runs
that would detect the effect planned for 80 % of the time (`_power`). The metric's direction comes from
one table for every input form (`bench_lineup.DIRECTIONS`), the spec overriding it.
Groups (mmlu) are judged on their subtasks' documents pooled, as lm-eval weighs them by size; a group and
each task outside a group decide (one headline metric each), subtasks and other metrics are evidence;
the deciding lines are corrected together by Holm's step-down (`gate.judge.overall`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneproof.gate import stats
from tuneproof.gate.bench_lineup import BenchUnit, Lineup
from tuneproof.gate.probes import mcnemar_exact
from tuneproof.gate.spec import GateSpec
from tuneproof.gate.stats import FAIL, INCONCLUSIVE, PASS, Floor, MetricResult, verdict_for

AGREE = 1e-6  # per-document mean vs lm-eval's aggregate: relative tolerance (float sums)


@dataclass(kw_only=True, slots=True)
class BenchLine:
    """One judged (task or group, filter, metric) and what it rests on."""

    unit: BenchUnit
    metric: str
    filter: str
    deciding: bool
    hypothesis: str
    margin: float | None
    test: str  # "floor" | "exact McNemar" | "paired bootstrap"
    result: MetricResult
    lm_eval: dict[str, list[float | None]]  # lm-eval's own figure per run of each arm (in `result.unit`)
    power: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # the power line for a family of that many verdicts corrected together (Holm): set by `judge_line`,
    # read once the family is known (`gate.judge.overall`); not part of the report
    plan: Callable[[int], str] | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return f"{self.unit.name} {self.metric}" + ("" if self.filter == "none" else f" ({self.filter})")

    def to_dict(self) -> dict[str, Any]:
        out = self.result.to_dict()
        out.update(
            task=self.unit.name, kind=self.unit.kind, filter=self.filter, metric=self.metric,
            deciding=self.deciding, hypothesis=self.hypothesis, margin=self.margin, test=self.test,
            num_documents=self.result.num_prompts, lm_eval_aggregate=self.lm_eval, power=self.power,
            **self.extra,
        )  # fmt: skip
        return out


@dataclass(slots=True)
class Benchmarks:
    lines: list[BenchLine]
    notes: list[str]
    gated: bool

    def deciding(self) -> list[BenchLine]:
        return [line for line in self.lines if line.deciding] if self.gated else []


def judge_benchmarks(lineup: Lineup, spec: GateSpec) -> Benchmarks:
    """Every line of `lineup` (`bench_lineup.line_up` checked the arms) judged, with lm-eval's aggregates."""
    notes = list(lineup.notes)
    lines = []
    for unit in lineup.units:
        task_spec = spec.benchmarks.task(unit.name)
        headline = lineup.headline(unit, task_spec)
        for filt, metric in unit.rows:
            b, t = lineup.scores(unit, filt, metric)
            higher = lineup.higher(unit, metric, task_spec.higher_is_better)
            hypothesis = task_spec.hypothesis or "not-worse"
            line = judge_line(unit, filt, metric, b, t, higher, hypothesis, task_spec.margin, spec.floor_k,
                              task_spec.floor, spec.practical_floor)  # fmt: skip
            line.deciding = unit.top and (filt, metric) == headline
            line.lm_eval = lineup.aggregates(unit, filt, metric, line.result.unit == "%")
            differs = _agreement(line, b, t)
            line.extra["lm_eval_differs"] = bool(differs)
            notes.extend(differs)
            if higher is None:  # never guessed: the same data must not pass one way and fail the other
                line.extra["direction"] = "unknown"
                line.result.judgement, line.power = None, None
                line.result.note = (
                    f"not judged: whether higher {metric} is better is not known (in neither tuneproof's "
                    "table nor a results file): set higher_is_better for the task in the spec's "
                    "[benchmarks.task.NAME]"
                )
            lines.append(line)
    for task, filt, metric, why in lineup.unjudged:
        notes.append(f"{task} {metric} ({filt}) not judged: {why}")
    return Benchmarks(lines, notes, spec.benchmarks.gate)


def judge_line(
    unit: BenchUnit,
    filt: str,
    metric: str,
    b: np.ndarray,
    t: np.ndarray,
    higher: bool | None,
    hypothesis: str,
    margin: float | None,
    k: float,
    bar: float | None = None,
    practical: bool = False,
) -> BenchLine:
    """One line: runs x documents scores of both arms (documents in the same order). `bar`: a floor the
    change must also beat (the spec's, in the table's unit); `practical`: the measured floor must be
    beaten too. Significance is the estimator's own (`stats.estimate`), never the floor's."""
    percent = bool(np.all((b >= 0) & (b <= 1)) and np.all((t >= 0) & (t <= 1)))
    binary = bool(np.all((b == 0) | (b == 1)) and np.all((t == 0) | (t == 1)))
    scale, unit_name = (100.0, "%") if percent else (1.0, "")
    b, t = b * scale, t * scale
    runs_ok = b.shape[0] >= 2 and t.shape[0] >= 2
    single = " and ".join(arm for arm, x in (("base", b), ("tuned", t)) if x.shape[0] < 2)
    single = "1 run per arm" if " and " in single else f"1 run in the {single} arm"
    floor = stats.measured_floor(b, t, k, " pts" if percent else "") if runs_ok else Floor(None, "none", "")
    if floor.value is not None:
        floor = Floor(
            floor.value, floor.source, floor.detail.replace("paired by prompt", "paired by document")
        )
    if runs_ok:
        test = "clustered t"
    else:  # McNemar pairs one 0/1 outcome per document and arm: one run each
        test = "exact McNemar" if binary and b.shape[0] == t.shape[0] == 1 else "paired bootstrap"
        floor = Floor(None, "none", f"{single}: the run-to-run noise is not measured")
    given = bar is not None
    if bar is None and practical and floor.value is not None:
        bar = floor.value
    name = f"{unit.name} {metric}" + ("" if filt == "none" else f" ({filt})")
    wanted = "unknown" if higher is None else "down" if higher is False else "up"
    if given:  # the floor the verdict must beat is the spec's: the table shows it, marked as given
        floor = Floor(
            bar, "given", f"given in the spec: a change must beat {bar:g}{' pts' if percent else ''}"
        )
    result = _result(name, wanted, b, t, floor, unit_name)
    line = BenchLine(unit=unit, metric=metric, filter=filt, deciding=False, hypothesis=hypothesis,
                     margin=margin, test=test, result=result, lm_eval={})  # fmt: skip
    if result.delta is None or result.ci95 is None:
        return line
    est = stats.estimate(b, t, np.ones(b.shape[1], bool))
    p_value = est.p_value
    if test == "exact McNemar":
        b0, t0 = b[0] / scale, t[0] / scale
        p_value = mcnemar_exact(int(np.sum((b0 == 1) & (t0 == 0))), int(np.sum((b0 == 0) & (t0 == 1))))
        line.extra["mcnemar_p"] = p_value
    sign = -1.0 if higher is False else 1.0
    gain = sign * result.delta
    lo, hi = sorted((sign * result.ci95[0], sign * result.ci95[1]))
    if est.se == 0 and gain == 0:
        outcome, reason = _no_difference(hypothesis)
        line.extra["identical"] = True
    else:
        outcome, reason = _decide(hypothesis, gain, (lo, hi), bar, margin, p_value, result.unit, test, sign)
    if not runs_ok:
        reason += f"; {single}, so the run-to-run noise is not measured and the {test} decides"
    reason += est.shift_note
    line.extra.update(se=est.se, df=est.df, bar=bar)
    if not line.extra.get("identical"):  # the p-value Holm's correction reads (gate.judge.overall)
        result.extra["p_value"] = _decisive_p(hypothesis, gain, margin, est, p_value)
    half = (hi - lo) / 2
    result.judgement = verdict_for(outcome, reason, abs(gain) - half, half)
    rule = _Rule(hypothesis, margin, bar)
    result.mde = rule.mde(est.se, est.df)
    measured = floor.value if floor.source == "measured" else None
    line.plan = lambda family: _power(b, t, rule, measured, est, result.unit, gain, family)
    if outcome == INCONCLUSIVE:
        line.power = line.plan(1)
    return line


def _result(name: str, wanted: str, b: np.ndarray, t: np.ndarray, floor: Floor, unit: str) -> MetricResult:
    """The line's numbers (no verdict yet): both arms, delta, the estimator's interval."""
    n = b.shape[1]
    result = MetricResult(
        name=name, wanted=wanted, unit=unit, base=None, tuned=None, delta=None, floor=floor.value,
        floor_source=floor.source, floor_detail=floor.detail, ratio=None, ci95=None, mde=None, num_prompts=n,
        judgement=None,
    )  # fmt: skip
    if n < 2:
        result.note = f"not judged: {n} document(s) have a value in both arms (need >= 2)"
        return result
    est = stats.estimate(b, t, np.ones(n, bool))
    result.base, result.tuned = float(b.mean()), float(t.mean())
    result.delta = float(t.mean(axis=0).mean() - b.mean(axis=0).mean())
    result.ci95 = est.ci95
    result.ratio = abs(result.delta) / floor.value if floor.value else None
    result.extra["test"] = est.test
    return result


def _no_difference(hypothesis: str) -> tuple[str, str]:
    """Both arms identical in every document and run (both zero, say): the data plainly say no change."""
    if hypothesis == "not-worse":
        return PASS, "no difference: both arms score the same on every document in every run"
    return FAIL, "no difference: both arms score the same on every document in every run, so not better"


def _decisive_p(
    hypothesis: str, gain: float, margin: float | None, est: stats.DeltaEstimate, p: float
) -> float:
    """The p-value of the test this line's verdict rests on: no change (two-sided), or, with a margin,
    the one-sided test against the margin's line, doubled to the same 0.05 scale: not worse by more than
    it (not-worse), better by more than it (better)."""
    if not margin or est.se <= 0:
        return p
    from scipy import stats as sps

    if hypothesis == "not-worse" and gain > -margin:
        return min(1.0, float(2 * sps.t.sf((gain + margin) / est.se, est.df)))
    if hypothesis == "better" and gain > margin:
        return min(1.0, float(2 * sps.t.sf((gain - margin) / est.se, est.df)))
    return p


def _decide(
    hypothesis: str,
    gain: float,
    ci: tuple[float, float],
    bar: float | None,
    margin: float | None,
    p_value: float | None,
    unit: str,
    test: str,
    sign: float = 1.0,
) -> tuple[str, str]:
    """The verdict on the gain (delta signed so that > 0 is better) and its interval (low, high):
    significance from the interval (and McNemar's p where it decides); `bar` a floor to beat as well.
    The text gives the change as measured (`sign` -1: lower is better) and says which side is better."""
    lo, hi = ci
    pts = " pts" if unit == "%" else ""
    beyond = bar is None or abs(gain) > bar
    mcnemar_no = test == "exact McNemar" and (p_value is None or p_value >= 0.05)
    significant = not mcnemar_no
    raw = sorted((sign * lo, sign * hi))
    better_side = "higher" if sign > 0 else "lower"
    where = (
        f"change {sign * gain:+.4g}{pts} ({better_side} is better), 95 % CI [{raw[0]:+.4g}, {raw[1]:+.4g}], "
        f"{test}"
    )
    if bar is not None:
        where += f", floor to beat {bar:.4g}"
    if test == "exact McNemar" and p_value is not None:
        where += f", McNemar p = {p_value:.3g}"

    def side(limit: float, worse: bool) -> str:
        """ "below -2" on the gain scale, as the measured change reads it."""
        word = ("below" if worse else "above") if sign > 0 else ("above" if worse else "below")
        return f"{word} {sign * limit:+.4g}" if limit else f"{word} 0"

    inside = f"inside the floor the spec asks to beat ({where})"
    excludes = lo > 0 or hi < 0
    if mcnemar_no and excludes and beyond:
        return INCONCLUSIVE, (
            f"the exact McNemar test, which decides with one run per arm, does not reject no change (p >= "
            f"0.05) though the bootstrap interval excludes 0: too few documents changed to say ({where})"
        )
    if hypothesis == "not-worse":
        m = margin or 0.0
        if m > 0 and lo > -m:
            return (
                PASS,
                f"not worse by more than {m:.4g}{pts}: the interval stays {side(-m, False)} ({where})",
            )
        if m == 0 and lo > 0 and beyond and significant:
            return PASS, f"not worse: better, the whole interval {side(0.0, False)} ({where})"
        if gain < 0 and hi < -m and beyond and significant:
            by = f" by more than {m:.4g}{pts}" if m else ""
            return FAIL, f"worse{by}: the interval {side(-m, True)} ({where})"
        if not beyond:
            return INCONCLUSIVE, inside
        if not m:
            return INCONCLUSIVE, f"the interval spans 0: neither better nor worse shown ({where})"
        return INCONCLUSIVE, f"not shown within {m:.4g}{pts} of the base, nor worse by more ({where})"
    m = margin or 0.0
    if gain > 0 and lo > m and beyond and significant:
        by = f" by more than {m:.4g}{pts}" if m else ""
        return PASS, f"better{by}: the interval {side(m, False)} ({where})"
    if gain < 0 and hi < 0 and beyond and significant:
        return FAIL, f"worse: the interval {side(0.0, True)} ({where})"
    if not beyond:
        return INCONCLUSIVE, inside
    return INCONCLUSIVE, f"not shown better ({where})"


@dataclass(frozen=True, slots=True)
class _Rule:
    """What a true change must clear to be called, on the gain scale: the test (t * se), a floor to beat
    (`bar`), and for "better" with a margin, the margin plus the test (the interval above the margin)."""

    hypothesis: str
    margin: float | None
    bar: float | None

    @property
    def shift(self) -> float:
        return self.margin if self.hypothesis == "better" and self.margin else 0.0

    @property
    def hurdle(self) -> float | None:
        """The bar past the shift, on the shifted scale (None: the test alone)."""
        if self.bar is None or self.bar <= self.shift:
            return None
        return self.bar - self.shift

    def power(self, effect: float, se: float, df: float, alpha: float) -> float:
        return stats.clustered.power(effect - self.shift, se, df, self.hurdle, alpha)

    def power_at(self, parts: stats.clustered.Parts, effect: float, docs: int, runs: tuple[int, int],
                 alpha: float) -> float:  # fmt: skip
        return parts.power_at(effect - self.shift, docs, runs, self.hurdle, alpha)

    def mde(self, se: float, df: float) -> float:
        return self.shift + stats.clustered.mde(se, df, self.hurdle)

    def at_best_half(self, effect: float) -> bool:
        """A true change no larger than what it must clear is called half the time at best."""
        return effect <= self.shift + (self.hurdle or 0.0) and (self.shift > 0 or self.hurdle is not None)


def _power(
    b: np.ndarray,
    t: np.ndarray,
    rule: _Rule,
    measured: float | None,
    est: stats.DeltaEstimate,
    unit: str,
    gain: float,
    family: int = 1,
) -> str:
    """The documents, or runs, at which the rule as applied detects the effect it plans for with 80 %
    power, from the variance parts these data show (`clustered.Parts`); never a count already taken. The
    effect: for not-worse with a margin, the margin (shown within it when the truth is no change); else the
    larger of the measured run-to-run floor and the floor to beat. In a `family` of verdicts corrected
    together (Holm), the test runs at 0.05 / family, Holm's first step, which covers the line's rank."""
    pts = " pts" if unit == "%" else ""
    alpha = stats.clustered.ALPHA / family
    if rule.hypothesis == "not-worse" and rule.margin:
        effect, what = rule.margin, "the margin"
    else:
        named = (
            (measured, "the measured run-to-run floor"),
            (rule.bar, "the floor to beat"),
            (rule.margin, "the margin"),
        )
        found = [(v, w) for v, w in named if v]
        if not found:
            return (
                "no effect size to plan for: no floor is measured (1 run in an arm) and the spec gives no "
                "margin or floor (its margin sets one)"
            )
        effect, what = max(found, key=lambda x: x[0])
    at = (
        f" at alpha 0.05 / {family} (Holm's first step over {family} deciding verdicts)" if family > 1 else ""
    )
    power_now = rule.power(effect, est.se, est.df, alpha)
    head = f"a {effect:.3g}{pts} effect ({what}) is detected {100 * power_now:.0f} % of the time here{at}"
    if power_now >= stats.clustered.POWER:
        return (
            f"{head} (80 % wanted): the change seen, {gain:+.3g}{pts} (+ is better), is not that effect: it "
            "lies nearer the line the verdict must clear, where these data cannot decide"
        )
    if rule.at_best_half(effect):
        return (
            f"{head}; no count of documents or runs brings it to 80 %: a true change the size of what the "
            "verdict must clear is called half the time at best (the estimate must land beyond it); the MDE "
            "column names the change called 80 % of the time here"
        )
    parts = stats.clustered.Parts.read(b, t)
    runs = (b.shape[0], t.shape[0])
    single = [arm for arm, r in zip(("base", "tuned"), runs, strict=True) if r < 2]
    if single:  # no run-to-run variance measured: the documents' spread as it is
        d = t.mean(axis=0) - b.mean(axis=0)
        parts = stats.clustered.Parts(float(np.var(d, ddof=1)), (0.0, 0.0), 0.0)
    n, advice = b.shape[1], []
    wanted = stats.clustered.POWER
    docs = _smallest(lambda k: rule.power_at(parts, effect, k, runs, alpha) >= wanted, n + 1, 10**8)
    if docs is not None:
        advice.append(f"about {docs:,} documents at these runs (now {n:,})")
    if single:
        advice.append(f"a second run in the {' and '.join(single)} arm{'s' if len(single) > 1 else ''} would "
                      "measure the run-to-run noise")  # fmt: skip
    else:
        more = _smallest(
            lambda r: rule.power_at(parts, effect, n, (r, r), alpha) >= wanted, max(runs) + 1, 10**4
        )
        if more is not None:
            advice.append(f"{more} runs per arm at these documents (now {runs[0]} + {runs[1]})")
        else:
            advice.append("more runs alone cannot: the documents' own spread is too large")
    return f"{head}; for 80 %: " + ", or ".join(advice) if advice else head


def _smallest(enough: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest count in [low, high] for which `enough` holds (it holds for every larger count once it
    does), or None: doubling, then bisection."""
    step = low
    while step <= high and not enough(step):
        low, step = step + 1, step * 2
    if step > high:
        if not enough(high):
            return None
        step = high
    while low < step:
        mid = (low + step) // 2
        if enough(mid):
            step = mid
        else:
            low = mid + 1
    return step


def _agreement(line: BenchLine, b: np.ndarray, t: np.ndarray) -> list[str]:
    """lm-eval's figure of each run against the run's per-document mean: a mismatch is called out."""
    out = []
    scale = 100.0 if line.result.unit == "%" else 1.0
    for arm, scores in (("base", b), ("tuned", t)):
        for i, figure in enumerate(line.lm_eval.get(arm, [])):
            if figure is None:
                continue
            mean = float(scores[i].mean()) * scale
            if abs(mean - figure) > AGREE * max(1.0, abs(figure)):
                out.append(
                    f"{line.name}: run {i + 1} of the {arm} arm: lm-eval's aggregate {figure:.6g} differs "
                    f"from the per-document mean {mean:.6g}{line.unit.aggregate_note}"
                )
    return out
