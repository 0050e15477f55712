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


@dataclass(slots=True)
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
                    "table nor a results file); the spec's higher_is_better says"
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
    if bar is None and practical and floor.value is not None:
        bar = floor.value
    name = f"{unit.name} {metric}" + ("" if filt == "none" else f" ({filt})")
    result = _result(name, "down" if higher is False else "up", b, t, floor, unit_name)
    line = BenchLine(unit, metric, filt, False, hypothesis, margin, test, result, {})
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
        outcome, reason = _decide(hypothesis, gain, (lo, hi), bar, margin, p_value, result.unit, test)
    if not runs_ok:
        reason += f"; {single}, so the run-to-run noise is not measured and the {test} decides"
    reason += est.shift_note
    line.extra.update(se=est.se, df=est.df, bar=bar)
    if not line.extra.get("identical"):  # the p-value Holm's correction reads (gate.judge.overall)
        result.extra["p_value"] = _decisive_p(hypothesis, gain, margin, est, p_value)
    half = (hi - lo) / 2
    result.judgement = verdict_for(outcome, reason, abs(gain) - half, half)
    result.mde = stats.clustered.mde(est.se, est.df, bar)
    if outcome == INCONCLUSIVE:
        line.power = _power(b, t, margin or bar or floor.value, est, result.unit, bar, margin)
    return line


def _result(name: str, wanted: str, b: np.ndarray, t: np.ndarray, floor: Floor, unit: str) -> MetricResult:
    """The line's numbers (no verdict yet): both arms, delta, the estimator's interval."""
    n = b.shape[1]
    result = MetricResult(
        name, wanted, unit, None, None, None, floor.value, floor.source, floor.detail,
        None, None, None, n, None,
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
    """The p-value of the test this line's verdict rests on: no change (two-sided), or, for not-worse
    with a margin, not worse by more than the margin (one-sided, doubled to the same 0.05 scale)."""
    if hypothesis == "not-worse" and margin and gain > -margin and est.se > 0:
        from scipy import stats as sps

        return min(1.0, float(2 * sps.t.sf((gain + margin) / est.se, est.df)))
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
) -> tuple[str, str]:
    """The verdict on the gain (delta signed so that > 0 is better) and its interval (low, high):
    significance from the interval (and McNemar's p where it decides); `bar` a floor to beat as well."""
    lo, hi = ci
    pts = " pts" if unit == "%" else ""
    beyond = bar is None or abs(gain) > bar
    significant = test != "exact McNemar" or (p_value is not None and p_value < 0.05)
    where = f"change {gain:+.4g}{pts} (+ is better), 95 % CI [{lo:+.4g}, {hi:+.4g}], {test}"
    if bar is not None:
        where += f", floor to beat {bar:.4g}"
    if test == "exact McNemar" and p_value is not None:
        where += f", McNemar p = {p_value:.3g}"
    inside = f"inside the floor the spec asks to beat ({where})"
    if hypothesis == "not-worse":
        m = margin or 0.0
        if m > 0 and lo > -m:
            return PASS, f"not worse by more than {m:.4g}{pts}: the interval stays above -{m:.4g} ({where})"
        if m == 0 and lo > 0 and beyond and significant:
            return PASS, f"not worse: better, the whole interval above 0 ({where})"
        if gain < 0 and hi < -m and beyond and significant:
            below = (
                f" by more than {m:.4g}{pts}: the interval below {-m:+.4g}" if m else ": the interval below 0"
            )
            return FAIL, f"worse{below} ({where})"
        if not beyond:
            return INCONCLUSIVE, inside
        if not m:
            return INCONCLUSIVE, f"the interval spans 0: neither better nor worse shown ({where})"
        return INCONCLUSIVE, f"not shown within {m:.4g}{pts} of the base, nor worse by more ({where})"
    m = margin or 0.0
    if gain > 0 and lo > m and beyond and significant:
        return (
            PASS,
            f"better{f' by more than {m:.4g}{pts}' if m else ''}: the interval above {m:+.4g} ({where})",
        )
    if gain < 0 and hi < 0 and beyond and significant:
        return FAIL, f"worse: the interval below 0 ({where})"
    if not beyond:
        return INCONCLUSIVE, inside
    return INCONCLUSIVE, f"not shown better ({where})"


def _power(
    b: np.ndarray,
    t: np.ndarray,
    effect: float | None,
    est: stats.DeltaEstimate,
    unit: str,
    bar: float | None,
    margin: float | None,
) -> str:
    """The documents, or runs, at which the rule as applied detects an effect of `effect` (the margin, else
    the floor to beat, else the measured run-to-run floor) with 80 % power at alpha 0.05, from the variance
    parts these data show (`clustered.Parts`); never a count already taken."""
    pts = " pts" if unit == "%" else ""
    if not effect:
        return (
            "no effect size to plan for: no floor is measured (1 run in an arm) and the spec gives no margin "
            "or floor (its margin sets one)"
        )
    what = "the margin" if margin else "the floor to beat" if bar else "the measured run-to-run floor"
    beat = None if margin else bar  # a margin's claim (within it) needs no bar; a change must beat one
    n, runs = b.shape[1], (b.shape[0], t.shape[0])
    power_now = stats.clustered.power(effect, est.se, est.df, beat)
    head = f"a {effect:.3g}{pts} effect ({what}) is detected {100 * power_now:.0f} % of the time here"
    if power_now >= stats.clustered.POWER:
        return f"{head} (80 % wanted): the change seen is smaller than that"
    if beat is not None and effect <= beat:
        return (
            f"{head}; no count of documents or runs brings it to 80 %: a true change the size of the floor "
            "to beat is called half the time at best (the estimate must land beyond it); the MDE column "
            "names the change called 80 % of the time here"
        )
    parts = stats.clustered.Parts.read(b, t)
    if min(runs) < 2:  # no run-to-run variance measured: the documents' spread as it is
        d = t.mean(axis=0) - b.mean(axis=0)
        parts = stats.clustered.Parts(float(np.var(d, ddof=1)), (0.0, 0.0), 0.0)
    advice = []
    wanted = stats.clustered.POWER
    docs = _smallest(lambda k: parts.power_at(effect, k, runs, beat) >= wanted, n + 1, 10**8)
    if docs is not None:
        advice.append(f"about {docs:,} documents at these runs (now {n:,})")
    if min(runs) < 2:
        advice.append("2 runs per arm would measure the run-to-run noise")
    else:
        more = _smallest(lambda r: parts.power_at(effect, n, (r, r), beat) >= wanted, max(runs) + 1, 10**4)
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
